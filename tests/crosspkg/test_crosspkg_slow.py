"""Model-backed checks of the cross-package study (SmolLM2, a few items): the command end to end
through the three packages, and SafetyRepro's HELM run entries through helm-run/helm-summarize."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from safetyrepro.crosspkg.helm_env import helm_bin

HELM = helm_bin(required=False)
needs_helm = pytest.mark.skipif(HELM is None, reason="HELM is not installed (run `make helm`)")


def _has_plugin() -> bool:
    if HELM is None:
        return False
    code = (
        "import importlib.metadata as m; import sys; "
        "sys.exit(0 if any(e.value == 'safetyrepro.crosspkg.helm_plugin.run_specs' "
        "for e in m.entry_points(group='helm')) else 1)"
    )
    return subprocess.run([str(HELM / "python"), "-c", code]).returncode == 0


@pytest.mark.slow
@needs_helm
def test_crosspkg_end_to_end(tmp_path):
    from safetyrepro.crosspkg.study import run_study

    args = argparse.Namespace(
        model="smollm2",
        benchmarks=["truthfulqa", "bbq", "toxigen"],
        limit=2,
        out=str(tmp_path),
        packages=["lm-eval", "helm", "inspect"],
        precision="fp32",
        device="cpu",
        seed=42,
        max_new_tokens=16,
        batch_size=8,
        pairs=["lm-eval:helm", "helm:inspect"],
        no_decompose=False,
        fresh=False,
        helm_env=None,
        decompose_limit=None,
    )
    assert run_study(args) == 0
    for f in ("table7.md", "table8.md", "decomposition.md", "report.md", "waterfall_truthfulqa.png", "run.json"):
        assert (tmp_path / f).is_file(), f
    t = json.loads((tmp_path / "tables.json").read_text())
    t7 = {r["benchmark"]: r for r in t["table7"]}
    assert t7["truthfulqa"]["lm-eval n"] == 2 and t7["truthfulqa"]["helm n"] == 2 and t7["truthfulqa"]["inspect n"] == 2
    assert t7["toxigen"]["lm-eval n"] == 2 and t7["toxigen"]["packages"] == 1 and t7["toxigen"]["range"] is None
    d = json.loads((tmp_path / "decomposition.json").read_text())
    for b in ("truthfulqa", "bbq"):
        checks = d["benchmarks"][b]["checks"]
        # the emulated endpoints rebuild the very prompts the packages sent, and pick the same answers
        assert checks["lm-eval"]["prompt_identical"] == 1.0
        assert checks["helm"]["prompt_identical"] == 1.0
        assert checks["inspect"]["prompt_identical"] == 1.0
        for s in ("lm-eval", "helm", "inspect"):
            assert checks[s]["agreement"] == 1.0, (b, s, checks[s]["examples"])
        for w in d["benchmarks"][b]["walks"]:
            assert sum(w["shapley"].values()) == pytest.approx(w["end"] - w["start"])
    # rerunning reuses the native records (no package is run again)
    assert run_study(args) == 0


@pytest.mark.slow
@needs_helm
@pytest.mark.skipif(not _has_plugin(), reason="SafetyRepro is not installed in the HELM venv (run `make helm`)")
def test_helm_plugin_run_entries(tmp_path, monkeypatch):
    from safetyrepro.adapters.engine.engine import LoglikRequest, load_engine
    from safetyrepro.crosspkg.helm_env import helm_environment, write_plugin_env
    from safetyrepro.tasks.benchmarks.registry import get_benchmark
    from safetyrepro.tasks.rendering import continuation
    from safetyrepro.tasks.subsets import item_set

    # a relative folder, as in the README's recipe (`--helm-env runs/helm-plugin`, then `cd` into it)
    monkeypatch.chdir(tmp_path.parent)
    info = write_plugin_env(Path(tmp_path.name), "smollm2")
    m, e = info["model"], info["engine_deployment"]
    entries = [
        f"safetyrepro_bbq:template=T3,scoring=logprob,limit=3,model={m},model_deployment={e}",
        f"safetyrepro_bbq:template=T3,scoring=free_form,limit=3,max_new_tokens=16,model={m},model_deployment={e}",
    ]
    env = helm_environment(tmp_path)
    run = subprocess.run(
        [
            str(HELM / "helm-run"),
            "--run-entries",
            *entries,
            "--suite",
            "t",
            "--max-eval-instances",
            "3",
            "--local-path",
            "prod_env",
            "-o",
            "benchmark_output",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summ = subprocess.run(
        [str(HELM / "helm-summarize"), "--suite", "t", "-o", "benchmark_output", "--auto-generate-schema"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert summ.returncode == 0, summ.stderr[-3000:]
    suite = tmp_path / "benchmark_output" / "runs" / "t"
    assert (suite / "groups" / "safetyrepro_bbq.json").is_file()
    runs = {p.name.split(":")[1].split(",")[1]: p for p in suite.iterdir() if p.name.startswith("safetyrepro_bbq:")}
    stats = {n: json.loads((p / "per_instance_stats.json").read_text()) for n, p in runs.items()}
    assert all(len(s) == 3 for s in stats.values())
    # the logprob path equals SafetyRepro's own definition: argmax of summed log-likelihoods after the templated context
    bench = get_benchmark("bbq")
    eng = load_engine(info["folder"], "bf16", "cpu")
    items = item_set("bbq").items[:3]
    for inst in stats["scoring=logprob"]:
        got = next(s["mean"] for s in inst["stats"] if s["name"]["name"] == "safetyrepro_predicted_index")
        item = next(i for i in items if i.id == inst["instance_id"])
        ctx = eng.render(bench.prompt(item, "T3").messages())
        lls = [
            ll
            for ll, _ in eng.loglikelihood(
                [LoglikRequest(ctx, continuation(c, eng.has_chat_template)) for c in bench.candidates(item, "T3")]
            )
        ]
        assert got == bench.pick(lls)


@pytest.mark.slow
@needs_helm
@pytest.mark.skipif(not _has_plugin(), reason="SafetyRepro is not installed in the HELM venv (run `make helm`)")
def test_helm_run_spec_defaults_come_from_the_rules_and_the_subset(data_dir):
    """Unset, a run spec's reply budget is the rules file's for the template (T4: 256) and its item count
    the whole fixed subset, as in the sweep; nothing is fixed at 96 tokens and 300 items."""
    code = (
        "from safetyrepro.crosspkg.helm_plugin.run_specs import safetyrepro_spec as s; "
        "t4, t1 = s('bbq', 'T4', 'free_form'), s('xstest', 'T1', 'free_form'); "
        "print(t4.adapter_spec.max_tokens, t1.adapter_spec.max_tokens, t4.scenario_spec.args['limit'])"
    )
    out = subprocess.run([str(HELM / "python"), "-c", code], capture_output=True, text=True, timeout=300)
    from safetyrepro.tasks.subsets import item_set

    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["256", "96", str(len(item_set("bbq").items))]
