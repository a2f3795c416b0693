"""`safetyrepro sweep --task` on a task that ships with lm-eval (its arc_easy YAML on a local file, 4 items) for two
embedded models across 16 configurations (0 or 1 shot x chat template off/on x four system instructions), and
on an Inspect task defined outside SafetyRepro (tests/arithmetic_task.py), then `safetyrepro analyze` (issue 58):
rho_flip and the orderings are recomputed here from the items; a rerun asks no model anything, and a sweep killed
with SIGKILL resumes to the same grid. A declared template is a second template of the same benchmark, a
multiple-choice task's generated twin a second scoring of its cells, and an Inspect task's epochs are cells of their
own, each item's score the mean over its epochs."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from local_task import arc_easy_local

from safetyrepro.cli import main

pytestmark = pytest.mark.slow

MODELS = ("smollm2", "gemma3-270m")


def sweep_argv(task: str, envelope: Path, models: tuple[str, ...], limit: int, precision: str) -> list[str]:
    """`safetyrepro sweep --task ...` for these models and items (--out and --no-progress left to the caller)."""
    return [
        "sweep",
        "--task",
        task,
        "--envelope",
        str(envelope),
        "--models",
        *models,
        "--limit",
        str(limit),
        "--precision",
        precision,
    ]


TASK = "arc_easy_local"


@pytest.fixture(scope="module")
def swept(tmp_path_factory, fast_precision):
    root = tmp_path_factory.mktemp("anytask")
    task = arc_easy_local(root / "work")
    env = root / "envelope.yaml"
    assert main(["envelope", "--task", f"lm-eval:{task}", "--out", str(env)]) == 0
    text = env.read_text().replace("shots: [0, 1, 3]", "shots: [0, 1]")
    env.write_text(text.replace("system: [none, helpful]", "system: [none, helpful, careful, concise]"))
    out = root / "sweep"
    argv = sweep_argv(f"lm-eval:{task}", env, MODELS, 4, fast_precision)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    return root, argv, out


def _cells(folder) -> pd.DataFrame:
    g = pd.read_csv(folder / "grid.csv")
    return g.set_index(["model", "config_id"]).sort_index()[["score", "n_items", "parse_rate", "shots", "template"]]


def _analysis_as_the_items_say(out, models, task: str, n_configs: int, capsys) -> pd.DataFrame:
    """`analyze` on the grid: rho_flip and the number of strict orderings, recomputed here from items.parquet (each
    cell's score is the mean of its items' scores)."""
    grid = pd.read_csv(out / "grid.csv")
    assert set(grid["model"]) == set(models) and set(grid["benchmark"]) == {task}
    items = pd.read_parquet(out / "items.parquet")
    by_hand = items.groupby(["model", "config_id"])["item_score"].mean().unstack("model").dropna()  # both models'
    assert len(by_hand) == n_configs
    scores = grid.pivot(index="config_id", columns="model", values="score").loc[by_hand.index]
    assert scores.to_numpy() == pytest.approx(by_hand[list(scores.columns)].to_numpy(), abs=1e-12)

    assert main(["analyze", str(out / "grid.csv"), "--out", str(out / "analysis")]) == 0
    capsys.readouterr()
    a, b = sorted(models)
    diff = by_hand[a] - by_hand[b]
    n_plus, n_minus = int((diff > 0).sum()), int((diff < 0).sum())
    rho = pd.read_csv(out / "analysis" / "rho_flip.csv")
    row = rho[(rho["benchmark"] == task) & (rho["slice"] == "full")].iloc[0]
    assert (row["model_a"], row["model_b"]) == (a, b)
    assert (row["n_plus"], row["n_minus"], row["n_configs"]) == (n_plus, n_minus, n_configs)
    assert row["rho_flip"] == pytest.approx(min(n_plus, n_minus) / n_configs, abs=1e-12)
    strict = {tuple(sorted(models, key=lambda m: -r[m])) for _, r in by_hand.iterrows() if r[a] != r[b]}
    orderings = pd.read_csv(out / "analysis" / "orderings.csv")
    got = orderings[(orderings["benchmark"] == task) & (orderings["slice"] == "full")].iloc[0]
    assert got["n_orderings"] == len(strict) and got["n_configs"] == n_configs
    return grid


def test_the_grid_and_analyze_give_rho_flip_and_orderings_as_the_items_do(swept, capsys):
    """16 configurations (0 or 1 shot x chat template off/on x four system texts): Gemma 3 270M has no chat
    template, so it runs the 8 without and the analysis compares the two models on those."""
    _, _, out = swept
    grid = _analysis_as_the_items_say(out, MODELS, TASK, 8, capsys)
    assert len(grid) == 16 + 8 and (grid["model"] == "gemma3-270m").sum() == 8
    assert set(grid["n_items"]) == {4} and set(grid["scoring"]) == {"logprob"} and set(grid["shots"]) == {0, 1}
    # the template says what the run did: chat template off (+nochat), a system instruction (+sys=<its hash>)
    assert {t.split("+")[0] for t in grid["template"]} == {"task"} and grid["template"].nunique() == 8


INSPECT_ENVELOPE = """version: 1
task: inspect:{task}
axes:
  shots: [0]
  system: [none, helpful]
  decoding: [short, longer]
  solver: [own, cot]
decodings:
  short: {{temperature: 0.0, top_p: 1.0, do_sample: false, max_tokens: 3}}
  longer: {{temperature: 0.0, top_p: 1.0, do_sample: false, max_tokens: 8}}
"""


def test_an_inspect_task_defined_outside_safetyrepro_is_swept_the_same_way(tmp_path, capsys, fast_precision):
    """tests/arithmetic_task.py (generate() and Inspect's match() scorer) on the engine's provider: a system message
    or none x the task's solver alone or after chain of thought x two token budgets, 2 items."""
    task = f"{Path(__file__).parents[1] / 'arithmetic_task.py'}@arithmetic"
    env = tmp_path / "envelope.yaml"
    env.write_text(INSPECT_ENVELOPE.format(task=task))
    out = tmp_path / "sweep"
    argv = sweep_argv(f"inspect:{task}", env, MODELS, 2, fast_precision)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    grid = _analysis_as_the_items_say(out, MODELS, "arithmetic", 8, capsys)
    assert set(grid["package"]) == {"inspect"} and set(grid["scoring"]) == {"free_form"}
    assert {t.split("+")[0] for t in grid["template"]} == {"own", "cot"}  # the solver, kept apart
    assert set(grid["decoding"]) == {"greedy+max_tokens=3", "greedy+max_tokens=8"} and set(grid["n_items"]) == {2}


def test_verdict_certify_replay_and_the_eee_export_read_the_grid(swept, capsys):
    _, _, out = swept
    a, b = MODELS
    assert main(["verdict", a, b, "--grid", str(out / "grid.csv")]) == 0
    assert capsys.readouterr().out.startswith(f"{TASK}: ")
    certified = out.parent / "certify"
    argv = ["certify", "replay", str(out / "items.parquet"), "--grid", str(out / "grid.csv"), "--out", str(certified)]
    assert main(argv) == 0  # the rules beside the grid (the importer's) list the task: higher is better
    assert f"{TASK} gemma3-270m vs smollm2: " in capsys.readouterr().out
    assert (certified / "claims.csv").is_file() and (certified / "cost.json").is_file()
    assert main(["export", "eee", str(out / "grid.csv"), "--out", str(out.parent / "eee")]) == 0
    assert "exported 24 cells as EEE records (24 with instance-level samples)" in capsys.readouterr().out


def test_a_rerun_asks_no_model_anything(swept, monkeypatch, capsys):
    _, argv, out = swept
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("results_*.json")}
    assert len(before) == 24

    def no_model(*_a, **_k):
        raise AssertionError("a finished sweep loaded a model")

    monkeypatch.setattr("safetyrepro.adapters.backends.factory.open_backend", no_model)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "24 cells (2 models x 16 configurations)" in printed and printed.count("the model has no chat template") == 8
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("results_*.json")} == before


def test_a_sweep_killed_mid_way_resumes_to_the_same_grid(swept):
    root, argv, out = swept
    again = root / "killed"
    cmd = [sys.executable, "-m", "safetyrepro.cli", *argv, "--out", str(again), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and len(list((again / "runs").rglob("seed0"))) < 3:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = len(list((again / "runs").rglob("seed0")))
    assert 3 <= done < 24 and not (again / "grid.csv").exists()
    assert main([*argv, "--out", str(again), "--no-progress"]) == 0
    assert _cells(again).equals(_cells(out))
    assert not list(again.rglob(".*.part"))
    for x, y in itertools.pairwise(sorted((again / "runs").rglob("results_*.json"))):
        assert x.parent != y.parent  # one results file a run: nothing ran twice into one folder


TEMPLATED_ENVELOPE = """version: 1
task: lm-eval:{task}
axes:
  shots: [0]
  chat_template: [false]
  system: [none]
  decoding: [greedy]
  template: [own, qa]
templates:
  qa: {{doc_to_text: "Q: {{{{question}}}}\\nA:"}}
"""


def test_a_declared_template_is_a_second_template_of_the_same_benchmark(tmp_path, capsys, fast_precision):
    """The local arc_easy task in its own template and in a declared one (`qa`, its own doc_to_text) for SmolLM2,
    2 items: one benchmark, two templates in the grid, each run's prompt the template's."""
    task = arc_easy_local(tmp_path / "work")
    env = tmp_path / "envelope.yaml"
    env.write_text(TEMPLATED_ENVELOPE.format(task=task))
    out = tmp_path / "sweep"
    argv = sweep_argv(f"lm-eval:{task}", env, ("smollm2",), 2, fast_precision)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert "2 cells (1 models x 2 configurations) of arc_easy_local" in capsys.readouterr().out
    grid = pd.read_csv(out / "grid.csv")
    assert set(grid["benchmark"]) == {TASK} and sorted(grid["template"]) == ["qa+nochat", "task+nochat"]
    assert set(grid["n_items"]) == {2} and grid["config_id"].nunique() == 2 and grid["item_set"].nunique() == 1
    (qa,) = (out / "runs" / "lm-eval").rglob("*_tpl-qa/seed0/*/samples_arc_easy_local__qa_*.jsonl")
    first = pd.read_json(qa, lines=True).iloc[0]
    assert first["arguments"]["gen_args_0"]["arg_0"].startswith("Q: What is")
    assert (out / "templates" / "arc_easy_local__qa.yaml").is_file()


EPOCHS_ENVELOPE = """version: 1
task: inspect:{task}
axes:
  shots: [0]
  system: [none]
  decoding: [short]
  solver: [own]
  epochs: [1, 2]
decodings:
  short: {{temperature: 0.0, top_p: 1.0, do_sample: false, max_tokens: 3}}
"""


def test_inspect_epochs_are_kept_apart_and_read_as_the_mean_over_epochs(tmp_path, capsys, fast_precision):
    """tests/arithmetic_task.py for SmolLM2 at one and two epochs, 2 items: two cells of one benchmark, the
    two-epoch log holding 4 samples and its item scores their epochs' mean."""
    from inspect_ai.log import read_eval_log

    task = f"{Path(__file__).parents[1] / 'arithmetic_task.py'}@arithmetic"
    env = tmp_path / "envelope.yaml"
    env.write_text(EPOCHS_ENVELOPE.format(task=task))
    out = tmp_path / "sweep"
    argv = sweep_argv(f"inspect:{task}", env, ("smollm2",), 2, fast_precision)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert "2 cells (1 models x 2 configurations) of arithmetic" in capsys.readouterr().out
    grid = pd.read_csv(out / "grid.csv")
    assert sorted(grid["template"]) == ["own+n=60", "own-epochs2+n=60"] and set(grid["n_items"]) == {2}
    (log_file,) = (out / "runs" / "inspect").rglob("*_epochs-2/seed0/*.eval")
    log = read_eval_log(str(log_file))
    assert log.eval.task == "arithmetic__epochs2" and log.eval.config.epochs == 2 and len(log.samples or []) == 4
    by_item: dict[str, list[float]] = {}
    for s in log.samples or []:
        by_item.setdefault(str(s.id), []).append(1.0 if s.scores["match"].value == "C" else 0.0)
    items = pd.read_parquet(out / "items.parquet")
    two = items[items["config_id"].str.contains("own-epochs2")].set_index("item_id")["item_score"]
    assert two.to_dict() == {i: sum(v) / 2 for i, v in by_item.items()}


def test_a_multiple_choice_tasks_generated_twin_is_a_second_scoring_of_the_same_cells(tmp_path, capsys, fast_precision):
    """`scoring: [own, generate_until]` on the local arc_easy task for SmolLM2, 1 shot, 2 items: one package, one
    benchmark and template, scored by likelihood and by the generated answer, each cell the mean of its items, the
    generated one with its parse rate (replies that name a choice)."""
    task = arc_easy_local(tmp_path / "work")
    env = tmp_path / "envelope.yaml"
    env.write_text(
        TEMPLATED_ENVELOPE.format(task=task)
        .replace("shots: [0]", "shots: [1]")
        .replace("template: [own, qa]", "scoring: [own, generate_until]")
        .split("templates:")[0]
    )
    out = tmp_path / "sweep"
    argv = sweep_argv(f"lm-eval:{task}", env, ("smollm2",), 2, fast_precision)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert "2 cells (1 models x 2 configurations) of arc_easy_local" in capsys.readouterr().out
    grid = pd.read_csv(out / "grid.csv").set_index("scoring")
    assert sorted(grid.index) == ["free_form", "logprob"] and set(grid["package"]) == {"lm-eval"}
    assert set(grid["template"]) == {"task+nochat"} and set(grid["metric"]) == {"acc,none"}
    items = pd.read_parquet(out / "items.parquet")
    by_config = items.groupby("config_id")["item_score"].mean()
    assert grid.set_index("config_id")["score"].to_dict() == pytest.approx(by_config.to_dict(), abs=1e-12)
    (samples,) = (out / "runs" / "lm-eval").rglob("*_scoring-generate-until/seed0/*/samples_*.jsonl")
    first = json.loads(samples.read_text().splitlines()[0])
    assert first["target"] == "5" and first["acc"] in (0.0, 1.0)  # the right choice's text, matched or not
    # read when the reply is one of the choices' texts: the cell's parse rate and each item's flag say so
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    twin = items[items["config_id"].str.endswith("/free_form")].sort_values("item_id")
    assert twin["parsed"].tolist() == [bool(x["parse_rate"]) for x in sorted(lines, key=lambda x: x["doc"]["id"])]
    assert grid.loc["free_form", "parse_rate"] == pytest.approx(sum(x["parse_rate"] for x in lines) / len(lines))
