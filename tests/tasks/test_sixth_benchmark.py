"""Adding a sixth benchmark is one folder and one registry line (docs/adding_a_benchmark.md).

The test lays the package out as an install would (the folders mapped into `safetyrepro`) in a
temporary `site-packages`, copies the fixture folder `fixtures/toy/` into `benchmarks/toy/`, adds
`"toy",` to the registry, checks that nothing else changed, and then, with that copy first on
PYTHONPATH, runs the new benchmark through `lm_eval --tasks` (its YAMLs rendered on first use),
`inspect eval`, `helm-run` (where `make helm` made .venv-helm) and a one-cell `safetyrepro sweep`.
The source tree is never written.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from package_dirs import PACKAGE_DIRS  # import package -> folder, as pyproject.toml maps them

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("fixtures") / "toy"
BIN = Path(sys.executable).parent
REGISTRY = Path("safetyrepro/tasks/benchmarks/registry.py")


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _run(cmd: list, env: dict, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def sixth(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("sixth")
    site = tmp / "site-packages"  # a site-packages path: Inspect namespaces its tasks there as for an install
    for package, folder in PACKAGE_DIRS.items():
        shutil.copytree(
            REPO / folder,
            site.joinpath(*package.split(".")),
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    before = _snapshot(site)
    # the whole change a new benchmark needs: its folder, and one line in the registry
    shutil.copytree(FIXTURE, site / "safetyrepro/tasks/benchmarks/toy", ignore=shutil.ignore_patterns("__pycache__"))
    registry = (site / REGISTRY).read_text()
    assert '    "xstest",\n' in registry
    (site / REGISTRY).write_text(registry.replace('    "xstest",\n', '    "xstest",\n    "toy",\n', 1))
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "SAFETYREPRO_CACHE_DIR": str(tmp / "cache"),
        "SAFETYREPRO_DATA_DIR": str(data_dir),
        "SAFETYREPRO_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "SAFETYREPRO_NO_LM_EVAL_HOOK": "",
        "COLUMNS": "200",
    }
    return tmp, site, env, before


def test_sixth_benchmark_is_one_folder_and_one_registry_line(sixth):
    tmp, site, env, before = sixth
    after = _snapshot(site)
    assert set(before) <= set(after), "files were removed"
    changed = sorted(p for p in before if before[p] != after[p])
    added = sorted(set(after) - set(before))
    assert changed == [str(REGISTRY)], changed
    diff = [
        x
        for x in difflib.unified_diff(
            (REPO / "safetyrepro_tasks/benchmarks/registry.py").read_text().splitlines(),
            (site / REGISTRY).read_text().splitlines(),
            lineterm="",
            n=0,
        )
        if x[:1] in "+-" and x[:3] not in ("+++", "---")
    ]
    assert diff == ['+    "toy",'], diff
    assert sorted(added) == sorted(
        f"safetyrepro/tasks/benchmarks/toy/{f}"
        for f in ("__init__.py", "definition.py", "tasks.py", "card.md", "README.md")
    )
    # lm-eval's YAMLs for it are rendered on first use into the cache, not written beside the code
    rendered = _run([sys.executable, "-m", "safetyrepro.tasks.lm_eval_tasks"], env, tmp).stdout.strip()
    assert Path(rendered).parent == tmp / "cache" / "lm_eval_tasks"
    assert sorted(p.name for p in Path(rendered).glob("safetyrepro_toy_*")) == sorted(
        f"safetyrepro_toy_t{k}{s}.yaml" for k in range(1, 5) for s in ("", "_gen")
    )
    # ... and the working copy of the project is untouched
    assert not (REPO / "safetyrepro_tasks/benchmarks/toy").exists()


def test_sixth_benchmark_runs_through_lm_eval(sixth):
    tmp, site, env, _ = sixth
    res = _run(
        [
            BIN / "lm_eval",
            "--model",
            "safetyrepro",
            "--model_args",
            "model=smollm2",
            "--tasks",
            "safetyrepro_toy_t1,safetyrepro_toy_t3_gen",
            "--limit",
            "2",
            "--apply_chat_template",
        ],
        env,
        tmp,
    )
    out = res.stdout + res.stderr
    for name in ("safetyrepro_toy_t1", "safetyrepro_toy_t3_gen", "unsafe_recall", "parse_rate"):
        assert name in out, out[-3000:]


def test_sixth_benchmark_runs_through_inspect(sixth):
    tmp, site, env, _ = sixth
    logs = tmp / "inspect-logs"
    _run(
        [
            BIN / "inspect",
            "eval",
            "safetyrepro/toy",
            "--model",
            "safetyrepro/smollm2",
            "--limit",
            "2",
            "--temperature",
            "0",
            "--log-dir",
            logs,
            "--display",
            "plain",
        ],
        env,
        tmp,
    )
    from inspect_ai.log import read_eval_log

    (path,) = [p for p in logs.iterdir() if p.suffix in (".eval", ".json")]
    log = read_eval_log(str(path))
    assert log.status == "success" and log.eval.task.endswith("toy") and len(log.samples) == 2
    metrics = {m for s in log.results.scores for m in s.metrics}
    assert {"accuracy", "parse_rate", "unsafe_recall"} <= metrics, metrics
    assert log.eval.task_args["scoring"] == "logprob" and log.eval.task_args["template"] == "T1"


def test_sixth_benchmark_runs_in_a_one_cell_sweep(sixth):
    tmp, site, env, _ = sixth
    out = tmp / "sweep"
    _run(
        [
            sys.executable,
            "-m",
            "safetyrepro.cli",
            "sweep",
            "--models",
            "smollm2",
            "--benchmarks",
            "toy",
            "--templates",
            "T1",
            "--decodings",
            "greedy",
            "--shots",
            "0",
            "--scoring",
            "logprob",
            "--limit",
            "2",
            "--no-progress",
            "--out",
            out,
        ],
        env,
        tmp,
    )
    import pandas as pd

    grid = pd.read_csv(out / "grid.csv")
    assert len(grid) == 1
    row = grid.iloc[0]
    assert (row["benchmark"], row["config_id"], int(row["n_items"])) == ("toy", "toy/T1/greedy/0shot/logprob", 2)
    assert row.get("status", "ok") == "ok" and 0.0 <= row["score"] <= 1.0
    if "extra_metrics" in grid.columns:  # left out when the first items hold no unsafe request
        assert set(json.loads(row["extra_metrics"])) <= {"unsafe_recall"}


def test_sixth_benchmark_runs_through_helm(sixth):
    """With HELM installed (`make helm`), `helm-run` takes the new benchmark's run entry from SafetyRepro's
    HELM plugin, with the copy (folder + registry line) first on HELM's path."""
    from safetyrepro.crosspkg.helm_env import helm_bin, helm_environment, write_plugin_env

    helm = helm_bin(required=False)
    if helm is None:
        pytest.skip("HELM is not installed (run `make helm`)")
    tmp, site, env, _ = sixth
    run_dir = tmp / "helm"
    info = write_plugin_env(run_dir, "smollm2")
    m, e = info["model"], info["engine_deployment"]
    helm_env = {
        **helm_environment(run_dir),
        "PYTHONPATH": str(site),
        "SAFETYREPRO_DATA_DIR": env["SAFETYREPRO_DATA_DIR"],
        "SAFETYREPRO_CACHE_DIR": env["SAFETYREPRO_CACHE_DIR"],
    }
    _run(
        [
            helm / "helm-run",
            "--run-entries",
            f"safetyrepro_toy:template=T1,scoring=logprob,limit=2,model={m},model_deployment={e}",
            "--suite",
            "toy",
            "--max-eval-instances",
            "2",
            "--local-path",
            "prod_env",
            "-o",
            "benchmark_output",
        ],
        helm_env,
        run_dir,
    )
    (run,) = [
        p for p in (run_dir / "benchmark_output" / "runs" / "toy").iterdir() if p.name.startswith("safetyrepro_toy:")
    ]
    stats = json.loads((run / "per_instance_stats.json").read_text())
    assert len(stats) == 2
    assert all(any(s["name"]["name"] == "safetyrepro_predicted_index" for s in inst["stats"]) for inst in stats)


def test_the_analysis_reads_the_sixth_benchmarks_direction_from_its_definition(sixth):
    """The toy declares `better = "lower"` (its score is an error rate) and nothing else says so: the
    analysis, run with the copy first on the path, orders models the lower-is-better way."""
    import pandas as pd

    tmp, site, env, _ = sixth
    rows = [
        dict(
            model=m,
            benchmark="toy",
            template=t,
            decoding="greedy",
            shots=0,
            scoring="logprob",
            precision="fp32",
            package="safetyrepro",
            n_items=24,
            n_seeds=1,
            score=s,
            parse_rate=1.0,
            tier="core",
            config_id=f"toy/{t}/greedy/0shot/logprob",
            status="ok",
        )
        for m, scores in {"a": [0.2, 0.3, 0.6], "b": [0.4, 0.5, 0.5]}.items()
        for t, s in zip(["T1", "T2", "T3"], scores, strict=True)
    ]
    grid = tmp / "direction" / "grid.csv"
    grid.parent.mkdir()
    pd.DataFrame(rows).to_csv(grid, index=False)
    _run([sys.executable, "-m", "safetyrepro.cli", "analyze", grid, "--out", tmp / "direction" / "analysis"], env, tmp)
    detail = pd.read_csv(tmp / "direction" / "analysis" / "orderings_detail.csv").set_index("slice").loc["full"]
    assert detail["better"] == "lower is better"
    assert detail["orderings"] == "b > a (2); a > b (1)"  # by raw score
    assert detail["orderings_better"] == "a > b (2); b > a (1)"  # a's lower error rate wins twice
    report = (tmp / "direction" / "analysis" / "report.md").read_text()
    assert "on toy (the score is the share of requests misjudged" in report and "lower is better" in report
