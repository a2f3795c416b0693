"""The envelope of a task SafetyRepro does not define (issue 58): its defaults from the task's facts, the rules
file that `safetyrepro envelope --task ... --out` writes and `sweep --task --envelope` reads, and the refusals
before anything runs. The task is lm-eval's own arc_easy on a local file (tests/anytask/local_task.py)."""

from __future__ import annotations

import pytest
from local_task import arc_easy_local

from safetyrepro.anytask.envelope import TaskFacts, TaskRef, default_envelope, parse_envelope
from safetyrepro.cli import main
from safetyrepro.errors import UserError

LM_EVAL = TaskRef("lm-eval", "arc_easy")
INSPECT = TaskRef("inspect", "tasks.py@arithmetic")


def test_a_task_is_named_with_its_package():
    assert TaskRef.parse("lm-eval:arc_easy") == LM_EVAL
    assert TaskRef.parse("inspect:tasks.py@arithmetic") == INSPECT
    assert TaskRef.parse("my/task.yaml") == TaskRef("lm-eval", "my/task.yaml")
    for bad in ("arc_easy", "hf:arc_easy", "lm-eval:", "inspect: "):
        with pytest.raises(UserError, match="lm-eval:<task name or YAML file>"):
            TaskRef.parse(bad)


@pytest.mark.parametrize(
    ("ref", "output_type", "fewshot", "configs", "runs", "stress"),
    [
        (LM_EVAL, "multiple_choice", True, 12, 12, 0),  # 3 shot counts x chat off/on x 2 system texts
        (LM_EVAL, "generate_until", True, 24, 36, 12),  # x greedy / sampled (2 seeds); sampled is stress
        (LM_EVAL, "multiple_choice", False, 8, 8, 0),  # 0 shots x chat off/on x 4 system texts
        (LM_EVAL, "generate_until", False, 16, 24, 8),
        (INSPECT, "generate_until", False, 12, 18, 9),  # 3 system messages x solver own/cot x 2 decodings
    ],
)
def test_the_default_envelope_is_12_to_48_configurations_from_what_the_task_offers(
    ref, output_type, fewshot, configs, runs, stress
):
    env = default_envelope(ref, TaskFacts("t", output_type, fewshot))
    cfgs = env.configs()
    assert len(cfgs) == configs and sum(len(env.seeds(c)) for c in cfgs) == runs
    assert sum(env.tier(c) == "stress" for c in cfgs) == stress
    assert len({c.run_id for c in cfgs}) == configs  # every configuration its own folder
    if not fewshot:
        assert {c.shots for c in cfgs} == {0}
    assert parse_envelope(env.text()) == env  # the rules file reads back as the same envelope


def test_a_rules_file_is_checked_key_by_key():
    text = default_envelope(LM_EVAL, TaskFacts("t", "generate_until", True)).text()
    with pytest.raises(UserError, match="unknown key 'temperature'"):
        parse_envelope(text.replace("version: 1", "temperature: 1"))
    with pytest.raises(UserError, match="system 'polite' has no text"):
        parse_envelope(text.replace("system: [none, helpful]", "system: [none, polite]"))
    with pytest.raises(UserError, match="decoding 'hot' is not defined"):
        parse_envelope(text.replace("decoding: [greedy, sampled]", "decoding: [greedy, hot]"))
    with pytest.raises(UserError, match="axes.shots must be a list of int"):
        parse_envelope(text.replace("shots: [0, 1, 3]", "shots: [zero]"))
    env = parse_envelope(
        text.replace("system: [none, helpful]", "system: [none, pirate]").replace(
            "systems: {", "systems: {pirate: 'Answer as a pirate would.', "
        )
    )
    assert env.systems["pirate"] == "Answer as a pirate would." and len(env.configs()) == 24
    with pytest.raises(UserError, match="solver and args are an Inspect task's axes"):
        parse_envelope(text.replace("axes:", "axes:\n  solver: [own, cot]"))
    inspect = default_envelope(INSPECT, TaskFacts("t", "generate_until", False)).text()
    with pytest.raises(UserError, match="shots and chat_template are an lm-eval task's axes"):
        parse_envelope(inspect.replace("shots: [0]", "shots: [0, 3]"))


def test_envelope_task_prints_the_defaults_before_anything_runs(tmp_path, capsys):
    task = arc_easy_local(tmp_path / "work")
    out = tmp_path / "env.yaml"
    assert main(["envelope", "--task", f"lm-eval:{task}", "--list", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"task lm-eval:{task} (arc_easy_local): multiple_choice, 60 items, few-shot examples: yes" in printed
    assert "12 configurations (0 stress), 12 runs a model" in printed
    assert "  3shot_chat_sys-helpful_greedy  core" in printed
    env = parse_envelope(out.read_text())
    assert env.task == TaskRef("lm-eval", str(task)) and env.shots == (0, 1, 3)
    out.write_text(out.read_text().replace("shots: [0, 1, 3]", "shots: [0]"))
    assert main(["envelope", "--task", f"lm-eval:{task}", "--envelope", str(out)]) == 0
    assert "4 configurations (0 stress), 4 runs a model" in capsys.readouterr().out
    assert main(["envelope", "--task", f"lm-eval:{task}", "--rules", str(out)]) == 2
    assert "with --task give an envelope file as --envelope" in capsys.readouterr().err


def _refused(capsys, *argv) -> str:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_sweep_task_refuses_what_does_not_apply_before_writing(tmp_path, capsys):
    task = arc_easy_local(tmp_path / "work")
    out = tmp_path / "out"
    sweep = ["sweep", "--task", f"lm-eval:{task}", "--models", "smollm2", "--out", out]
    assert "--tier selects among the five benchmarks'" in _refused(capsys, *sweep, "--tier", "core")
    assert "--executor is a setting of the five benchmarks' sweep" in _refused(capsys, *sweep, "--executor", "ray")
    assert "--package is a setting of the five benchmarks' sweep" in _refused(capsys, *sweep, "--package", "inspect")
    assert "lm-eval knows no task 'nope'" in _refused(
        capsys, "sweep", "--task", "lm-eval:nope", "--include_path", task.parent, "--models", "smollm2", "--out", out
    )
    assert "--task inspect:x.py: Inspect finds no task there" in _refused(
        capsys, "sweep", "--task", "inspect:x.py", "--models", "smollm2", "--out", out
    )
    other = tmp_path / "other.yaml"
    other.write_text("version: 1\ntask: lm-eval:arc_easy\naxes: {shots: [0]}\n")
    assert "is the envelope of lm-eval:arc_easy, not of --task" in _refused(capsys, *sweep, "--envelope", other)
    twice = ["sweep", "--task", f"lm-eval:{task}", "--models", "smollm2", "smollm2", "--out", out]
    assert "--models names a model twice" in _refused(capsys, *twice)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "holds files that no `safetyrepro sweep --task` wrote" in _refused(capsys, *sweep)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert "--envelope goes with --task" in _refused(
        capsys, "sweep", "--models", "smollm2", "--envelope", other, "--out", tmp_path / "o2"
    )


def test_a_decoding_becomes_lm_evals_gen_kwargs_token_budget_included():
    from safetyrepro.anytask.lm_eval_task import generation_kwargs

    greedy, sampled = {"temperature": 0.0, "do_sample": False}, {"temperature": 0.7, "top_p": 0.9, "do_sample": True}
    assert generation_kwargs(greedy, 0, generates=False) is None  # likelihood scoring samples nothing
    assert generation_kwargs(greedy, 0, generates=True) == {"temperature": 0.0, "do_sample": False}
    assert generation_kwargs({**sampled, "max_tokens": 16}, 2, generates=True) == {
        "temperature": 0.7,
        "top_p": 0.9,
        "do_sample": True,
        "seed": 2,
        "max_gen_toks": 16,
    }
