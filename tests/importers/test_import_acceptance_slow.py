"""Issue 25's acceptance, with real models and the packages' own command lines:

- `lm_eval` on the embedded SmolLM2 and on the same model exported as an HF folder, one SafetyRepro
  task at 0 and 3 shots, with and without the chat template, each with --output_path and
  --log_samples; imported, the grid's scores are the printed ones, and on the configurations a sweep
  can run its rho_flip is the sweep's (and the sweep's own lm-eval logs import to the sweep's grid);
- the same for `inspect eval safetyrepro/xstest` logs of two models and two templates;
- an lm-eval built-in task (arc_easy) run from a local data file, no hub, imported with a mapping file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from safetyrepro.analysis import api

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # heavy: `make test-heavy`, not CI (see .ci/run)

BIN = Path(sys.executable).parent
TASK = "safetyrepro_xstest_t1"
LIMIT = "6"
INSPECT_LIMIT = "12"  # logprob cells are cheap: more items, scores that can differ between the templates
RHO_COLUMNS = ["benchmark", "slice", "model_a", "model_b", "n_plus", "n_minus", "n_zero", "n_configs", "rho_flip"]


def env_for(tmp_path: Path) -> dict:
    return {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def run(argv: list, env: dict, cwd: Path, timeout: int = 3000) -> subprocess.CompletedProcess:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(map(str, argv))}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    return res


def printed_scores(stdout: str) -> dict[str, dict[str, float]]:
    """lm-eval's printed table: task -> metric -> value (4 decimals)."""
    out: dict[str, dict[str, float]] = {}
    task = None
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or cells[0] in ("Tasks",) or set(cells[0]) <= {"-"} and cells[0]:
            continue
        task = cells[0] or task
        if task and cells[4] and re.fullmatch(r"-?\d+(\.\d+)?", cells[6]):
            out.setdefault(task, {})[cells[4]] = float(cells[6])
    return out


def sweep(models: list[str], out: Path, env: dict, tmp_path: Path, *extra: str, limit: str = LIMIT) -> pd.DataFrame:
    from safetyrepro.adapters.catalogue.weights import cache_sharing_models

    cache = cache_sharing_models(tmp_path / f"cache-{out.name}")  # its own outputs cache: the model work is redone
    run(
        [
            BIN / "safetyrepro",
            "sweep",
            "--models",
            *models,
            "--benchmarks",
            "xstest",
            "--decodings",
            "greedy",
            "--limit",
            limit,
            "--no-progress",
            "--out",
            out,
            *extra,
        ],
        {**env, "SAFETYREPRO_CACHE_DIR": str(cache)},
        tmp_path,
    )
    return pd.read_csv(out / "grid.csv", dtype={"model": str})


def rho(grid: pd.DataFrame, rules: str | None = None) -> pd.DataFrame:
    return api.rho_flip(grid, rules=rules)[RHO_COLUMNS].sort_values(RHO_COLUMNS[:4]).reset_index(drop=True)


LM_EVAL_TEST = "test_lm_eval_folders_import_with_the_printed_scores_and_the_sweeps_rho_flip"
INSPECT_TEST = "test_inspect_logs_of_two_templates_import_with_the_logged_scores_and_the_sweeps_rho_flip"
ARC_TEST = "test_a_built_in_lm_eval_task_from_a_local_file_imports_with_a_mapping"


@pytest.fixture(scope="module")
def launched(request, tmp_path_factory, data_dir):
    """The package runs and sweeps of the tests selected in this module, started together in one pool of two
    (one torch thread each: much of each run is single-threaded start-up), in the tests' order: while one test
    imports and analyses its runs (one process at a time), the pool already runs the next test's, so neither
    core waits. Each test gets its own folder and futures; what it checks is unchanged."""
    selected = {item.originalname for item in request.session.items if item.module is request.module}
    root = tmp_path_factory.mktemp("acceptance")
    env = env_for(root)
    found: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        if LM_EVAL_TEST in selected:
            found[LM_EVAL_TEST] = launch_lm_eval(pool, root / "lm-eval-test", env)
        if INSPECT_TEST in selected:
            found[INSPECT_TEST] = launch_inspect(pool, root / "inspect-test", env)
        if ARC_TEST in selected:
            found[ARC_TEST] = launch_arc(pool, root / "arc-test", env)
        yield found
        pool.shutdown(cancel_futures=True)


def launch_lm_eval(pool: ThreadPoolExecutor, root: Path, env: dict) -> dict:
    root.mkdir()
    hf = root / "DIR"
    run([BIN / "safetyrepro", "models", "export", "smollm2", "--out", hf], env, root)
    # the configurations a sweep runs (the chat template applied, as the sweep does for chat models); first, as
    # the longest job
    swept = pool.submit(
        sweep,
        ["smollm2", f"lm-eval:hf:pretrained={hf}", "qwen2.5-coder-0.5b"],
        root / "sweep",
        env,
        root,
        "--templates",
        "T1",
        "--scoring",
        "logprob",
        "--shots",
        "0",
        "3",
        "--batch-size",
        "8",
    )
    models = {
        "smollm2": ["--model", "safetyrepro", "--model_args", "model=smollm2"],
        "hf": ["--model", "hf", "--model_args", f"pretrained={hf}", "--batch_size", "8"],
        "qwen2.5-coder-0.5b": ["--model", "safetyrepro", "--model_args", "model=qwen2.5-coder-0.5b"],
    }
    jobs = []
    for name, flags in models.items():
        for shots in (0, 3):
            for chat in (True, False):
                folder = root / "lm-eval" / f"{name}-{shots}shot-{'chat' if chat else 'plain'}"
                jobs.append(
                    (
                        name,
                        shots,
                        chat,
                        folder,
                        [
                            BIN / "lm_eval",
                            *flags,
                            "--tasks",
                            TASK,
                            "--limit",
                            LIMIT,
                            "--num_fewshot",
                            str(shots),
                            "--output_path",
                            folder,
                            "--log_samples",
                            *(["--apply_chat_template"] if chat else []),
                        ],
                    )
                )
    outputs = [pool.submit(lambda argv: run(argv, env, root).stdout, j[4]) for j in jobs]
    return {"root": root, "hf": hf, "jobs": jobs, "outputs": outputs, "swept": swept}


def launch_inspect(pool: ThreadPoolExecutor, root: Path, env: dict) -> dict:
    root.mkdir()
    logs = root / "logs"
    swept = pool.submit(
        sweep,
        ["smollm2", "qwen2.5-coder-0.5b"],
        root / "sweep",
        env,
        root,
        "--package",
        "inspect",
        "--templates",
        "T1",
        "T2",
        "--scoring",
        "logprob",
        "--shots",
        "0",
        limit=INSPECT_LIMIT,
    )
    jobs = [
        [
            BIN / "inspect",
            "eval",
            "safetyrepro/xstest",
            "--model",
            "safetyrepro/smollm2,safetyrepro/qwen2.5-coder-0.5b",  # one log per model: one start-up for both
            "--limit",
            INSPECT_LIMIT,
            "-T",
            f"template={t}",
            "-T",
            "scoring=logprob",
            "--log-dir",
            logs / t,
            "--display",
            "none",
        ]
        for t in ("T1", "T2")
    ]
    runs = [pool.submit(run, argv, env, root) for argv in jobs]
    return {"root": root, "logs": logs, "runs": runs, "swept": swept}


def launch_arc(pool: ThreadPoolExecutor, root: Path, env: dict) -> dict:
    """lm-eval's own arc_easy task (its YAML included as it ships) over a local JSON-lines file in ARC's format."""
    import lm_eval

    root.mkdir()
    env = {**env, "HF_DATASETS_OFFLINE": "1"}
    data = root / "arc_local.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"id": f"q{i}", "question": q, "answerKey": "ABCD"[a], "choices": {"text": c, "label": list("ABCD")}}
            )
            + "\n"
            for i, (q, c, a) in enumerate(QUESTIONS)
        )
    )
    arc = Path(lm_eval.__file__).parent / "tasks" / "arc" / "arc_easy.yaml"
    tasks = root / "tasks"
    tasks.mkdir()
    local = {
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {s: str(data) for s in ("train", "validation", "test")}},
        "tag": [],
    }
    (tasks / "arc_easy_local.yaml").write_text(json.dumps({"include": str(arc), "task": "arc_easy_local", **local}))
    (tasks / "arc_easy_local_qa.yaml").write_text(
        json.dumps({"include": str(arc), "task": "arc_easy_local_qa", **local, "doc_to_text": "Q: {{question}}\nA:"})
    )
    jobs = [
        [
            BIN / "lm_eval",
            "--model",
            "safetyrepro",
            "--model_args",
            f"model={m}",
            "--tasks",
            "arc_easy_local,arc_easy_local_qa",
            "--include_path",
            tasks,
            "--num_fewshot",
            "0",
            "--apply_chat_template",
            "--output_path",
            root / "runs" / m,
            "--log_samples",
        ]
        for m in ("smollm2", "qwen2.5-coder-0.5b")
    ]
    outputs = [pool.submit(lambda argv: run(argv, env, root).stdout, argv) for argv in jobs]
    return {"root": root, "env": env, "outputs": outputs}


def test_lm_eval_folders_import_with_the_printed_scores_and_the_sweeps_rho_flip(tmp_path, launched):
    prep = launched[LM_EVAL_TEST]
    env, hf, jobs, root = env_for(tmp_path), prep["hf"], prep["jobs"], prep["root"]
    outputs = [f.result() for f in prep["outputs"]]
    # the mapping file gives the HF folder the label the sweep gives the same spec
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        f"models:\n  - match: {json.dumps(re.escape(f'hf:{hf}'))}\n"
        f"    label: {json.dumps(f'lm-eval:hf:pretrained={hf}')}\n"
    )
    out = tmp_path / "imported"
    printed_import = run(
        [BIN / "safetyrepro", "import", "lm-eval", root / "lm-eval", "--out", out, "--mapping", mapping],
        env,
        tmp_path,
    ).stdout
    grid = pd.read_csv(out / "grid.csv", dtype={"model": str})
    assert len(grid) == 12 and set(grid["n_items"]) == {6} and set(grid["precision"]) == {"bf16"}
    labels = {"smollm2": "smollm2", "hf": f"lm-eval:hf:pretrained={hf}", "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b"}
    score = grid.set_index(["model", "config_id"])["score"]
    for (name, shots, chat, folder, _), stdout in zip(jobs, outputs, strict=True):
        cid = f"xstest/T1{'' if chat else '+nochat'}/greedy/{shots}shot/logprob"
        recorded = json.loads(next(folder.rglob("results_*.json")).read_text())["results"][TASK]["acc,none"]
        assert score[(labels[name], cid)] == recorded  # exactly what lm-eval recorded
        assert round(score[(labels[name], cid)], 4) == printed_scores(stdout)[TASK]["acc"]  # and printed
    items = pd.read_parquet(out / "items.parquet")
    assert len(items) == 12 * 6
    swept = prep["swept"].result()  # the sweep of the configurations it can run (launch_lm_eval)
    assert len(swept) == 6
    same = grid[grid["config_id"].isin(swept["config_id"])]
    pairs = same.merge(swept, on=["model", "config_id"], suffixes=("", "_sweep"))
    assert len(pairs) == 6 and (pairs["score"] == pairs["score_sweep"]).all(), pairs[
        ["model", "config_id", "score", "score_sweep"]
    ]
    imported_rho, swept_rho = rho(same, str(out / "rules.yaml")), rho(swept)
    pd.testing.assert_frame_equal(imported_rho, swept_rho, check_dtype=False)
    # the whole imported grid (chat template on and off) analyses as four configurations
    res = run(
        [
            BIN / "safetyrepro",
            "analyze",
            out / "grid.csv",
            "--out",
            out / "analysis",
            "--no-figures",
            "--bootstrap",
            "100",
        ],
        env,
        tmp_path,
    )
    full = pd.read_csv(out / "analysis" / "rho_flip.csv")
    full = full[full["slice"] == "full"]
    assert (
        len(full) == 3
        and set(full["n_configs"]) == {4}
        and (full["n_plus"] + full["n_minus"] + full["n_zero"] == 4).all()
    )
    wide = grid.pivot(index="config_id", columns="model", values="score")
    for r in full.itertuples():  # rho_flip of every pair over the four configurations, from the imported scores
        diff = wide[r.model_a] - wide[r.model_b]
        assert (r.n_plus, r.n_minus, r.n_zero) == ((diff > 0).sum(), (diff < 0).sum(), (diff == 0).sum())
        assert r.rho_flip == min(r.n_plus, r.n_minus) / 4
    # the sweep's own lm-eval logs import to the sweep's grid, cell for cell and item for item
    again = tmp_path / "imported-sweep-logs"
    run(
        [
            BIN / "safetyrepro",
            "import",
            "lm-eval",
            root / "sweep" / "logs" / "lm-eval",
            "--out",
            again,
            "--mapping",
            mapping,
        ],
        env,
        tmp_path,
    )
    back = pd.read_csv(again / "grid.csv", dtype={"model": str}).merge(
        swept, on=["model", "config_id"], suffixes=("", "_sweep")
    )
    assert len(back) == 6 and (back["score"] == back["score_sweep"]).all()
    print("\n" + printed_import + res.stdout + "\n" + imported_rho.to_string())


def test_inspect_logs_of_two_templates_import_with_the_logged_scores_and_the_sweeps_rho_flip(tmp_path, launched):
    from inspect_ai.log import list_eval_logs, read_eval_log

    prep = launched[INSPECT_TEST]
    env, logs, root = env_for(tmp_path), prep["logs"], prep["root"]
    for f in prep["runs"]:
        f.result()
    out = tmp_path / "imported"
    printed_import = run([BIN / "safetyrepro", "import", "inspect", logs, "--out", out], env, tmp_path).stdout
    grid = pd.read_csv(out / "grid.csv", dtype={"model": str})
    logged = {}
    for info in list_eval_logs(str(logs), recursive=True):
        log = read_eval_log(info.name, header_only=True)
        logged[(log.eval.model.split("/", 1)[1], f"xstest/{log.eval.task_args['template']}/greedy/0shot/logprob")] = (
            log.results.scores[0].metrics["accuracy"].value
        )
    assert grid.set_index(["model", "config_id"])["score"].to_dict() == logged and len(logged) == 4
    assert (out / "rules.yaml").read_bytes() == (
        Path(api.__file__).parents[1] / "safetyrepro_tasks" / "envelope.yaml"
    ).read_bytes()
    swept = prep["swept"].result()
    pairs = grid.merge(swept, on=["model", "config_id"], suffixes=("", "_sweep"))
    assert len(pairs) == 4 and (pairs["score"] == pairs["score_sweep"]).all(), pairs
    imported_rho, swept_rho = rho(grid), rho(swept)
    pd.testing.assert_frame_equal(imported_rho, swept_rho, check_dtype=False)
    res = run(
        [
            BIN / "safetyrepro",
            "analyze",
            out / "grid.csv",
            "--out",
            out / "analysis",
            "--no-figures",
            "--bootstrap",
            "100",
        ],
        env,
        tmp_path,
    )
    # the sweep's own Inspect logs import to the sweep's grid
    again = tmp_path / "imported-sweep-logs"
    run([BIN / "safetyrepro", "import", "inspect", root / "sweep" / "logs", "--out", again], env, tmp_path)
    back = pd.read_csv(again / "grid.csv", dtype={"model": str}).merge(
        swept, on=["model", "config_id"], suffixes=("", "_sweep")
    )
    assert len(back) == 4 and (back["score"] == back["score_sweep"]).all()
    print("\n" + printed_import + res.stdout + "\n" + imported_rho.to_string())


QUESTIONS = [
    ("What color is the sky on a clear day?", ["green", "blue", "red", "black"], 1),
    ("How many legs does a spider have?", ["six", "four", "eight", "ten"], 2),
    ("Which gas do plants take in for photosynthesis?", ["carbon dioxide", "oxygen", "helium", "neon"], 0),
    ("What is frozen water called?", ["steam", "ice", "sand", "glass"], 1),
    ("Which planet is closest to the Sun?", ["Mars", "Venus", "Mercury", "Jupiter"], 2),
    ("What do bees make?", ["milk", "silk", "honey", "paper"], 2),
    ("Which organ pumps blood through the body?", ["heart", "lung", "liver", "skin"], 0),
    ("What force pulls objects toward the Earth?", ["magnetism", "friction", "gravity", "wind"], 2),
]


def test_a_built_in_lm_eval_task_from_a_local_file_imports_with_a_mapping(tmp_path, launched):
    """lm-eval's own arc_easy task (its YAML included as it ships), reading a local JSON-lines file in
    ARC's format instead of the hub; two prompt variants x two models, 0-shot."""
    prep = launched[ARC_TEST]
    env, runs = prep["env"], prep["root"] / "runs"
    outputs = [f.result() for f in prep["outputs"]]
    out = tmp_path / "imported"
    res = subprocess.run(
        [BIN / "safetyrepro", "import", "lm-eval", runs, "--out", out],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 2 and "arc_easy_local" in res.stderr and "--mapping" in res.stderr  # listed, not guessed
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        'tasks:\n  - match: "arc_easy_local(_qa)?"\n    benchmark: arc_easy\n    template: "lm-eval\\\\1"\n'
    )
    printed_import = run(
        [BIN / "safetyrepro", "import", "lm-eval", runs, "--out", out, "--mapping", mapping], env, tmp_path
    ).stdout
    grid = pd.read_csv(out / "grid.csv", dtype={"model": str})
    assert sorted(grid["config_id"].unique()) == [
        "arc_easy/lm-eval/greedy/0shot/logprob",
        "arc_easy/lm-eval_qa/greedy/0shot/logprob",
    ]
    assert set(grid["metric"]) == {"acc,none"} and set(grid["n_items"]) == {len(QUESTIONS)}
    for m, stdout in zip(("smollm2", "qwen2.5-coder-0.5b"), outputs, strict=True):
        printed = printed_scores(stdout)
        for task, template in (("arc_easy_local", "lm-eval"), ("arc_easy_local_qa", "lm-eval_qa")):
            row = grid[(grid["model"] == m) & (grid["template"] == template)].iloc[0]
            assert round(row["score"], 4) == printed[task]["acc"]
    items = pd.read_parquet(out / "items.parquet")
    assert set(items["item_id"]) == {f"q{i}" for i in range(len(QUESTIONS))} and len(items) == 4 * len(QUESTIONS)
    assert "external_benchmarks:\n- arc_easy" in (out / "rules.yaml").read_text()
    res = run(
        [
            BIN / "safetyrepro",
            "analyze",
            out / "grid.csv",
            "--out",
            out / "analysis",
            "--no-figures",
            "--bootstrap",
            "100",
        ],
        env,
        tmp_path,
    )
    table = pd.read_csv(out / "analysis" / "rho_flip.csv")
    full = table[(table["slice"] == "full") & (table["benchmark"] == "arc_easy")].iloc[0]
    wide = grid.pivot(index="config_id", columns="model", values="score")
    diff = wide["qwen2.5-coder-0.5b"] - wide["smollm2"]  # model_a is qwen (alphabetical)
    assert (full["n_plus"], full["n_minus"], full["n_zero"]) == ((diff > 0).sum(), (diff < 0).sum(), (diff == 0).sum())
    print("\n" + printed_import + res.stdout)
