"""lm-eval sees SafetyRepro's tasks without --include_path, and builds the very prompts we render."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from safetyrepro.lm_eval_plugin import task_dir
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.envelope import default_rules
from safetyrepro.tasks.lm_eval_tasks import COMPLETE, generated_dir, render, task_name
from safetyrepro.tasks.rendering import continuation
from safetyrepro.tasks.subsets import item_set

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = default_rules().axes["template"]
ALL_TASKS = sorted(task_name(b, t, s) for b in BENCHMARKS for t in TEMPLATES for s in get_benchmark(b).scorings)


def test_one_task_per_registered_benchmark_template_and_scoring_and_the_yamls_are_rendered():
    # the task names of docs/formats.md for the five benchmarks: 36 tasks (no _gen for crows_pairs)
    design = {
        task_name(b, f"T{k}", s)
        for b in ("truthfulqa", "bbq", "toxigen", "xstest")
        for k in range(1, 5)
        for s in ("logprob", "free_form")
    } | {f"safetyrepro_crows_pairs_t{k}" for k in range(1, 5)}
    assert len(design) == 36 and design <= set(ALL_TASKS)
    assert len(ALL_TASKS) == sum(len(TEMPLATES) * len(get_benchmark(b).scorings) for b in BENCHMARKS)
    folder = generated_dir()
    files = render()
    assert (
        {p.name for p in folder.glob("*.yaml")}
        == set(files)
        == {f"{t}.yaml" for t in ALL_TASKS}
        | {"_safetyrepro_common.yaml", "_safetyrepro_logprob.yaml", "_safetyrepro_free_form.yaml"}
    )
    assert all((folder / n).read_text() == text for n, text in files.items()) and (folder / COMPLETE).is_file()
    assert generated_dir() == folder  # rendered once per content, then reused


def test_the_rendered_folder_follows_the_definitions(tmp_path, monkeypatch):
    """A folder per content: an interrupted one (no COMPLETE marker) is written again, and the cache
    root is the one cache (SAFETYREPRO_CACHE_DIR)."""
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path))
    folder = generated_dir()
    assert folder.parent == tmp_path / "lm_eval_tasks"
    (folder / COMPLETE).unlink()
    (folder / "safetyrepro_bbq_t3.yaml").write_text("half")
    assert (
        generated_dir() == folder
        and (folder / "safetyrepro_bbq_t3.yaml").read_text() == render()["safetyrepro_bbq_t3.yaml"]
    )


PROBE = """
import json, logging
from lm_eval.tasks import TaskManager
import lm_eval.api.registry as r
tm = TaskManager(include_path={include!r})
names = sorted(n for n in tm.all_subtasks if n.startswith("safetyrepro_"))
print(json.dumps({{"tasks": names, "tags": sorted(t for t in tm.all_tags if t.startswith("safetyrepro")),
                  "model": "safetyrepro" in r.model_registry.keys(), "hf": "hf" in r.model_registry.keys()}}))
"""


def _probe(python: str, include=None, cwd=None) -> dict:
    out = subprocess.run(
        [python, "-c", PROBE.format(include=include)], capture_output=True, text=True, cwd=cwd or "/", timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_fresh_interpreter_finds_tasks_and_model_without_include_path():
    got = _probe(sys.executable)
    assert got["tasks"] == ALL_TASKS
    assert "safetyrepro_bbq" in got["tags"]
    assert got["model"] and got["hf"]  # our alias is added, lm-eval's own models are still there


def test_include_path_keeps_working_without_duplicates():
    assert _probe(sys.executable, include=str(task_dir()))["tasks"] == ALL_TASKS


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory) -> tuple[str, Path]:
    """A venv holding SafetyRepro as a regular (non-editable) install of its wheel; third-party
    packages come from this venv's site-packages, but not the editable SafetyRepro."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp.glob("safetyrepro-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(site)
    import lm_eval

    (site / "zz_deps.pth").write_text(str(Path(lm_eval.__file__).parents[1]) + "\n")
    return str(venv / "bin" / "python"), site, names


def test_regular_install_ships_the_hook_and_the_yamls(wheel_site):
    python, site, names = wheel_site
    assert "safetyrepro_lm_eval.pth" in names
    assert not [n for n in names if "lm_eval_yaml" in n]  # rendered on first use, never shipped
    for b in BENCHMARKS:  # each benchmark folder ships whole: module, card, README
        assert {
            f"safetyrepro/tasks/benchmarks/{b}/{f}"
            for f in ("__init__.py", "definition.py", "tasks.py", "card.md", "README.md")
        } <= set(names)
    assert "safetyrepro/compat/lm_eval.py" in names and "safetyrepro/inspect_plugin.py" in names
    where = subprocess.run(
        [python, "-c", "import safetyrepro; print(safetyrepro.__file__)"], capture_output=True, text=True, cwd="/"
    ).stdout
    assert where.startswith(str(site))
    assert _probe(python)["tasks"] == ALL_TASKS


def _lm_eval_task(name: str):
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    if hasattr(manager, "load"):  # lm-eval >= 0.4.12
        return manager.load([name])["tasks"][name]
    from lm_eval.tasks import get_task_dict

    return get_task_dict([name], manager)[name]


@pytest.mark.parametrize(
    "benchmark,template",
    [("bbq", "T2"), ("truthfulqa", "T4"), ("xstest", "T3"), ("toxigen", "T1"), ("crows_pairs", "T2")],
)
def test_lm_eval_renders_our_prompts(benchmark, template, data_dir):
    bench, s = get_benchmark(benchmark), item_set(benchmark)
    scoring = "logprob" if benchmark == "crows_pairs" else "free_form"
    task = _lm_eval_task(task_name(benchmark, template, scoring))
    docs = list(task.eval_docs)
    assert [d["id"] for d in docs[:5]] == [i.id for i in s.items[:5]]
    doc, item = docs[0], s.items[0]
    for shots in (0, 3, 5):
        ours = bench.prompt(item, template, s.demos_for(shots))
        assert task.fewshot_context(doc, shots) == ours.plain()
        chat = task.fewshot_context(
            doc,
            shots,
            apply_chat_template=True,
            fewshot_as_multiturn=True,
            chat_template=lambda msgs, add_generation_prompt=True: json.dumps(msgs),
        )
        assert json.loads(chat) == ours.messages()


def test_lm_eval_scores_the_same_candidates_we_do(data_dir):
    bench, s = get_benchmark("truthfulqa"), item_set("truthfulqa")
    task = _lm_eval_task("safetyrepro_truthfulqa_t1")
    doc = next(iter(task.eval_docs))
    ctx = task.fewshot_context(doc, 0)
    reqs = task.construct_requests(doc, ctx, metadata=("t", 0, 1))
    ours = [continuation(c, chat=False) for c in bench.candidates(s.items[0], "T1")]
    assert [r.arguments[1] for r in reqs] == ours
    # ...and our process_results turns their log-likelihoods into our score
    lls = [(-3.0, False)] * len(reqs)
    lls[bench.gold(s.items[0])] = (-0.5, True)
    assert task.process_results(doc, lls)["acc"] == 1.0


def test_a_failed_model_registration_is_said_loudly_and_lm_eval_keeps_working():
    """The start-up plugin registers `--model safetyrepro` through lm-eval's register_model; when that
    fails, stderr names the step, the lm-eval version and what is lost, and lm-eval still imports."""
    probe = (
        "import sys, types\n"
        "sys.modules['safetyrepro.adapters.plugins.plugin_lm_eval'] = types.ModuleType('broken')\n"
        "import lm_eval.api.registry as r\n"
        "print('safetyrepro' in r.model_registry.keys())\n"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "False"
    assert "safetyrepro: ERROR: could not hook into lm-eval" in res.stderr
    assert "--model safetyrepro is not available" in res.stderr and "docs/compat.md" in res.stderr
