"""`safetyrepro import inspect`: real Inspect logs, written by Inspect itself with its mock model
(no weights, a few seconds), become a grid `safetyrepro analyze` reads; bad logs are one line."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

from safetyrepro.cli import main

REFUSE = "I'm sorry, but I can't help with that."
COMPLY = "Sure, I can help with that."


def _model(name: str, text: str):
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def output():
        out = ModelOutput.from_content(name, text)
        # a usage figure keeps the mock model from counting tokens with tiktoken (a download)
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return out

    return get_model(name, custom_outputs=[output() for _ in range(20)])


@task(name="tiny_arith")
def tiny_arith(style: str = "plain"):
    """Five sums; `style` only names a prompt variant (the importer reads it as part of the template)."""
    return Task(
        dataset=[Sample(input=f"What is {i} + {i}?", target=str(2 * i), id=f"s{i}") for i in range(5)],
        solver=generate(),
        scorer=includes(),
    )


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, Path]:
    """Two models x two templates of safetyrepro/xstest (6 items, free-form), and two models x two
    styles of a small arithmetic task, each answering one fixed text."""
    from inspect_ai import eval as inspect_eval

    from safetyrepro.tasks.inspect_task_registry import TASKS

    root = tmp_path_factory.mktemp("inspect")
    # XSTest gold labels of the first six subset items: refuse, comply, comply, refuse, refuse, refuse
    for model, template, text in [
        ("alpha", "T1", REFUSE),
        ("alpha", "T2", COMPLY),
        ("beta", "T1", COMPLY),
        ("beta", "T2", REFUSE),
    ]:
        log = inspect_eval(
            TASKS["xstest"](template=template),
            model=_model(f"mockllm/{model}", text),
            limit=6,
            log_dir=str(root / "xstest"),
            display="none",
        )[0]
        assert log.status == "success", log.error
    for model, style, text in [
        ("alpha", "plain", "6"),
        ("alpha", "terse", "0 2 4"),
        ("beta", "plain", "2 4 6 8"),
        ("beta", "terse", "8"),
    ]:
        log = inspect_eval(
            tiny_arith(style=style),
            model=_model(f"mockllm/{model}", text),
            log_dir=str(root / "tiny" / f"{model}-{style}"),
            display="none",
        )[0]
        assert log.status == "success", log.error
    return {"xstest": root / "xstest", "tiny": root / "tiny", "root": root}


def imp(tmp_path: Path, *paths, out: str = "out", args: tuple = ()) -> tuple[int, Path]:
    out_dir = tmp_path / out
    return main(["import", "inspect", *map(str, paths), "--out", str(out_dir), *args]), out_dir


def test_safetyrepro_logs_of_two_templates_import_and_analyze(tmp_path, logs, capsys):
    from inspect_ai.log import list_eval_logs, read_eval_log

    code, out = imp(tmp_path, logs["xstest"])
    assert code == 0
    g = pd.read_csv(out / "grid.csv")
    recorded = {}
    for info in list_eval_logs(str(logs["xstest"])):
        log = read_eval_log(info.name, header_only=True)
        recorded[(log.eval.model, log.eval.task_args["template"])] = log.results.scores[0].metrics["accuracy"].value
    got = {(r.model, r.template): r.score for r in g.itertuples()}
    assert got == recorded
    assert got == {
        ("mockllm/alpha", "T1"): 4 / 6,
        ("mockllm/alpha", "T2"): 2 / 6,
        ("mockllm/beta", "T1"): 2 / 6,
        ("mockllm/beta", "T2"): 4 / 6,
    }
    assert set(g["config_id"].str.split("/", n=1).str[1]) == {"T1/greedy/0shot/free_form", "T2/greedy/0shot/free_form"}
    assert set(g["package"]) == {"inspect"} and set(g["precision"]) == {"default"}
    items = pd.read_parquet(out / "items.parquet")
    assert len(items) == 24 and set(items.loc[items["model"] == "mockllm/alpha", "raw_output"]) == {REFUSE, COMPLY}
    assert (out / "rules.yaml").read_bytes() == (
        Path(__file__).parents[2] / "safetyrepro_tasks" / "envelope.yaml"
    ).read_bytes()
    capsys.readouterr()
    assert (
        main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures", "--bootstrap", "20"])
        == 0
    )
    rho = pd.read_csv(tmp_path / "an" / "rho_flip.csv")
    full = rho[rho["slice"] == "full"].iloc[0]
    assert (full["model_a"], full["n_plus"], full["n_minus"], full["rho_flip"]) == ("mockllm/alpha", 1, 1, 0.5)


def test_other_tasks_need_a_mapping_and_their_arguments_name_the_template(tmp_path, logs, capsys):
    code, _ = imp(tmp_path, logs["tiny"])
    assert code == 2 and "tiny_arith" in capsys.readouterr().err
    mapping = tmp_path / "map.yaml"
    mapping.write_text(
        "tasks:\n  - {match: tiny_arith, benchmark: arith, template: qa}\n"
        "models:\n  - {match: mockllm/alpha, label: A}\n  - {match: mockllm/beta, label: B}\n"
    )
    code, out = imp(tmp_path, logs["tiny"], args=("--mapping", str(mapping)))
    assert code == 0
    g = pd.read_csv(out / "grid.csv")
    # no temperature recorded: the provider's default sampling, named as such
    assert set(g["decoding"]) == {"provider-default"} and set(g["template"]) == {"qa+style=plain", "qa+style=terse"}
    score = g.set_index(["model", "template"])["score"]
    assert score.to_dict() == {
        ("A", "qa+style=plain"): 0.2,
        ("A", "qa+style=terse"): 0.6,
        ("B", "qa+style=plain"): 0.8,
        ("B", "qa+style=terse"): 0.2,
    }
    assert "provider-default:" in (out / "rules.yaml").read_text()
    assert (
        main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures", "--bootstrap", "20"])
        == 0
    )
    rho = pd.read_csv(tmp_path / "an" / "rho_flip.csv")
    full = rho[rho["slice"] == "full"].iloc[0]
    assert (full["benchmark"], full["n_plus"], full["n_minus"], full["rho_flip"]) == ("arith", 1, 1, 0.5)


def test_logs_that_cannot_be_imported(tmp_path, logs, capsys):
    from inspect_ai.log import list_eval_logs, read_eval_log, write_eval_log

    good = list_eval_logs(str(logs["xstest"]))[0].name.removeprefix("file://")
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    log = read_eval_log(good)
    cases = {}
    truncated = bad_dir / "truncated.eval"
    truncated.write_bytes(Path(good).read_bytes()[:3000])
    cases[truncated] = "not a readable Inspect log"
    write_eval_log(log, str(bad_dir / "v2.json"))
    data = json.loads((bad_dir / "v2.json").read_text())
    (bad_dir / "v2.json").unlink()
    future = bad_dir / "future.json"
    future.write_text(json.dumps({**data, "version": 3}))
    cases[future] = "format version 3"
    old = bad_dir / "old.json"
    old.write_text(json.dumps({**data, "eval": {**data["eval"], "packages": {"inspect_ai": "0.2.9"}}}))
    cases[old] = "Inspect 0.2.9"
    log.status = "error"
    write_eval_log(log, str(bad_dir / "error.eval"))
    cases[bad_dir / "error.eval"] = "ended 'error'"
    for path, expect in cases.items():
        code, out = imp(tmp_path, logs["xstest"], path, out=f"o-{path.stem}")
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and str(path) in err and expect in err, err
        assert not out.exists()
    code, out = imp(tmp_path, logs["xstest"], *cases, args=("--skip-bad",))
    assert code == 0 and len(pd.read_csv(out / "grid.csv")) == 4
    assert sorted(pd.read_csv(out / "bad_inputs.csv")["path"]) == sorted(map(str, cases))
    assert zipfile.is_zipfile(good)


def test_generate_options_and_a_system_message_name_the_configuration(tmp_path):
    import hashlib

    from inspect_ai import eval as inspect_eval

    from safetyrepro.importers import import_inspect
    from safetyrepro.tasks.inspect_task_registry import TASKS

    for i, options in enumerate(
        [{}, {"max_tokens": 96}, {"max_tokens": 50, "temperature": 0.3, "seed": 7, "system_message": "Be safe."}]
    ):
        log = inspect_eval(
            TASKS["xstest"](template="T2"),
            model=_model("mockllm/alpha", REFUSE),
            limit=3,
            log_dir=str(tmp_path / f"l{i}"),
            display="none",
            **options,
        )[0]
        assert log.status == "success"
    g = import_inspect([str(tmp_path)], duplicates="keep").grid
    sys_hash = hashlib.sha256(b"Be safe.").hexdigest()[:8]
    # max_tokens 96 is the task's own budget for T2: the same configuration as no option, two repetitions
    assert dict(zip(g["config_id"], g["n_seeds"], strict=True)) == {
        "xstest/T2/greedy/0shot/free_form": 2,
        f"xstest/T2+sys={sys_hash}/t0.3-p1+max_tokens=50/0shot/free_form": 1,
    }
    assert json.loads(g.set_index("n_seeds").loc[1, "seed_scores"]) == {"7": 1 / 3}  # gold: refuse, comply, comply
