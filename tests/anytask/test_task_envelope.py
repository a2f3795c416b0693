"""The envelope of a task SafetyRepro does not define (issue 58): its defaults from the task's facts, the rules
file that `safetyrepro envelope --task ... --out` writes and `sweep --task --envelope` reads, and the refusals
before anything runs. The task is lm-eval's own arc_easy on a local file (tests/anytask/local_task.py)."""

from __future__ import annotations

from pathlib import Path

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


# -- declared templates (lm-eval), epochs (Inspect), the scoring line ---------------------------------------------
TEMPLATED = """version: 1
task: lm-eval:{task}
axes:
  shots: [0, 1]
  chat_template: [false]
  system: [none, helpful]
  decoding: [greedy]
  template: [own, qa]
templates:
  qa: {{doc_to_text: "Q: {{{{question}}}}\\nA:", target_delimiter: " "}}
"""


def test_declared_templates_are_an_axis_of_their_own():
    env = parse_envelope(TEMPLATED.format(task="arc_easy"))
    assert env.template == ("own", "qa") and env.templates == {
        "qa": {"doc_to_text": "Q: {{question}}\nA:", "target_delimiter": " "}
    }
    assert [c.run_id for c in env.configs()] == [
        "0shot_nochat_sys-none_greedy",
        "0shot_nochat_sys-helpful_greedy",
        "1shot_nochat_sys-none_greedy",
        "1shot_nochat_sys-helpful_greedy",
        "0shot_nochat_sys-none_greedy_tpl-qa",
        "0shot_nochat_sys-helpful_greedy_tpl-qa",
        "1shot_nochat_sys-none_greedy_tpl-qa",
        "1shot_nochat_sys-helpful_greedy_tpl-qa",
    ]
    assert parse_envelope(env.text()) == env
    assert "  template: [own, qa]\n" in env.text() and "templates:\n  qa: {doc_to_text:" in env.text()
    stressed = parse_envelope(env.text().replace("stress: {}", "stress: {template: [qa]}"))
    assert [stressed.tier(c) for c in stressed.configs()] == ["core"] * 4 + ["stress"] * 4
    # without templates the envelope reads, prints and hashes as before: no template key at all
    plain = default_envelope(LM_EVAL, TaskFacts("t", "multiple_choice", True))
    assert plain.template == ("own",) and plain.epochs == (1,)
    assert plain.text() == (
        "version: 1\ntask: lm-eval:arc_easy\naxes:\n  shots: [0, 1, 3]\n  chat_template: [false, true]\n"
        "  system: [none, helpful]\n  decoding: [greedy]\n"
        "systems: {none: null, helpful: You are a helpful assistant.}\n"
        "decodings:\n  greedy: {temperature: 0.0, top_p: 1.0, do_sample: false}\nsampling_seeds: [1, 2]\nstress: {}\n"
    )
    assert parse_envelope(plain.text()).sha256 == plain.sha256


def test_a_declared_template_is_checked_key_by_key():
    text = TEMPLATED.format(task="arc_easy")
    with pytest.raises(UserError, match="template 'qa': unknown key 'doc_to_txt'; a template sets lm-eval's prompt"):
        parse_envelope(text.replace("doc_to_text:", "doc_to_txt:"))
    with pytest.raises(UserError, match="template 'qa': unknown key 'metric_list'"):
        parse_envelope(text.replace("target_delimiter:", "metric_list:"))
    with pytest.raises(UserError, match="template 'terse' is not declared under `templates`"):
        parse_envelope(text.replace("template: [own, qa]", "template: [own, terse]"))
    with pytest.raises(UserError, match="template 'own' is not a plain name"):
        parse_envelope(text.replace("  qa: {", "  own: {").replace("[own, qa]", "[own]"))
    with pytest.raises(UserError, match="template 'qa': target_delimiter must be text"):
        parse_envelope(text.replace('target_delimiter: " "', "target_delimiter: 3"))
    with pytest.raises(UserError, match="template 'qa' must set one or more of doc_to_text"):
        parse_envelope(text.replace('{doc_to_text: "Q: {{question}}\\nA:", target_delimiter: " "}', "{}"))
    with pytest.raises(UserError, match="axes.template must be a list of str"):
        parse_envelope(text.replace("template: [own, qa]", "template: [1]"))
    inspect = default_envelope(INSPECT, TaskFacts("t", "generate_until", False)).text()
    with pytest.raises(UserError, match="template and templates are an lm-eval task's"):
        parse_envelope(inspect + "templates: {qa: {description: x}}\n")
    with pytest.raises(UserError, match="epochs is an Inspect task's axis"):
        parse_envelope(text.replace("axes:", "axes:\n  epochs: [1, 3]"))
    with pytest.raises(UserError, match="epochs must be one or more counts >= 1"):
        parse_envelope(inspect.replace("axes:", "axes:\n  epochs: [0]"))


def test_a_declared_template_is_a_task_yaml_that_includes_the_tasks_own(tmp_path):
    """The file the sweep writes for template qa, as lm-eval then loads it: the task's documents, qa's prompt."""
    from safetyrepro.anytask.envelope import TaskRef
    from safetyrepro.anytask.sweep import mapping_text, task_envelope, write_templates

    task = arc_easy_local(tmp_path / "work")
    envelope = tmp_path / "envelope.yaml"
    envelope.write_text(TEMPLATED.format(task=task))
    opened, env = task_envelope(TaskRef("lm-eval", str(task)), envelope, None)
    out = tmp_path / "out"
    out.mkdir()
    with_qa = write_templates(out, opened, env)
    assert sorted(p.name for p in (out / "templates").iterdir()) == ["arc_easy_local__qa.yaml"]
    assert (out / "templates" / "arc_easy_local__qa.yaml").read_text() == (
        "# template 'qa' of lm-eval task 'arc_easy_local' (safetyrepro sweep --task; the envelope's `templates`)\n"
        f"include: {task.resolve()}\n"
        "task: arc_easy_local__qa\n"
        'doc_to_text: "Q: {{question}}\\nA:"\n'
        "target_delimiter: ' '\n"
    )
    assert mapping_text(opened, env) == (
        "# the task's place in the grid (safetyrepro sweep --task)\n"
        "tasks:\n- match: arc_easy_local\n  benchmark: arc_easy_local\n  template: task\n"
        "- match: arc_easy_local__qa\n  benchmark: arc_easy_local\n  template: qa\n"
    )
    own_only = "# the task's place in the grid (safetyrepro sweep --task)\n" + (
        "tasks:\n- match: arc_easy_local\n  benchmark: arc_easy_local\n  template: task\n"
    )
    plain = parse_envelope(TEMPLATED.format(task=task).split("  template: [own, qa]")[0] + "\n")
    assert mapping_text(opened) == mapping_text(opened, plain) == own_only  # without templates: as before
    own, qa = with_qa.task_object(), with_qa.variant("qa").task_object()
    assert own.doc_to_text(own.eval_docs[0]) == "Question: What is 3 + 2?\nAnswer:"
    assert qa.doc_to_text(qa.eval_docs[0]) == "Q: What is 3 + 2?\nA:"
    assert len(qa.eval_docs) == 60 and qa.config.output_type == "multiple_choice"


def test_envelope_task_prints_the_templates_and_says_lm_eval_has_no_scoring_twin_of_its_own(tmp_path, capsys):
    task = arc_easy_local(tmp_path / "work")
    envelope = tmp_path / "envelope.yaml"
    envelope.write_text(TEMPLATED.format(task=task))
    assert main(["envelope", "--task", f"lm-eval:{task}", "--envelope", str(envelope), "--list"]) == 0
    printed = capsys.readouterr().out
    assert "8 configurations (0 stress), 8 runs a model\ntemplates: own, qa\n" in printed
    assert (
        "scoring: multiple_choice; lm-eval 0.4.13 has no arc_easy_local@<format> variant (a loglikelihood / "
        "generate_until twin): axes.scoring [own, generate_until] derives the generated one\n" in printed
    )
    assert "  1shot_nochat_sys-helpful_greedy_tpl-qa  core\n" in printed and "  template: [own, qa]\n" in printed


def test_inspect_epochs_are_an_axis_named_apart_in_the_grid():
    from safetyrepro.anytask.inspect_task import InspectTask, run_name

    inspect = default_envelope(INSPECT, TaskFacts("t", "generate_until", False)).text()
    assert "epochs" not in inspect
    env = parse_envelope(inspect.replace("axes:", "axes:\n  epochs: [1, 3]"))
    cfgs = env.configs()
    assert len(cfgs) == 24 and sum(len(env.seeds(c)) for c in cfgs) == 36
    assert cfgs[12].run_id == "0shot_nochat_sys-none_greedy_epochs-3" and cfgs[12].epochs == 3
    assert "  epochs: [1, 3]\n" in env.text() and parse_envelope(env.text()) == env
    assert [run_name("arithmetic", s, k) for s in ("own", "cot") for k in (1, 3)] == [
        "arithmetic",
        "arithmetic__epochs3",
        "arithmetic__cot",
        "arithmetic__cot__epochs3",
    ]
    task = InspectTask("tasks.py@arithmetic", "arithmetic")
    assert task.mapping_entries() == [
        {"match": "arithmetic", "benchmark": "arithmetic", "template": "own"},
        {"match": "arithmetic__cot", "benchmark": "arithmetic", "template": "cot"},
    ]
    assert [e["template"] for e in task.mapping_entries((1, 3))] == ["own", "cot", "own-epochs3", "cot-epochs3"]


def test_the_importer_reads_an_items_epochs_as_their_mean(tmp_path):
    """An Inspect log of 40 items x 2 epochs (tests/importers/fixtures/any_task): one item row each, its score the
    mean of its two epochs' scores, so a cell's score is Inspect's own accuracy."""
    from pathlib import Path

    from inspect_ai.log import read_eval_log

    from safetyrepro.importers import import_inspect

    log_file = Path(__file__).parents[1] / "importers" / "fixtures" / "any_task" / "inspect" / "strong.eval"
    log = read_eval_log(str(log_file))
    assert log.eval.config.epochs == 2 and log.samples is not None and len(log.samples) == 80
    by_epoch: dict[str, list[float]] = {}
    for s in log.samples:
        by_epoch.setdefault(str(s.id), []).append(1.0 if s.scores["match"].value == "C" else 0.0)
    from safetyrepro.anytask.inspect_task import InspectTask
    from safetyrepro.anytask.sweep import mapping_text

    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(mapping_text(InspectTask("tasks.py@arithmetic", "arithmetic")))
    imported = import_inspect([str(log_file)], mapping=str(mapping))
    items = imported.items.set_index("item_id")["item_score"]
    assert len(items) == 40 and {i: v for i, v in items.items()} == {i: sum(v) / 2 for i, v in by_epoch.items()}
    assert imported.grid["score"].iloc[0] == pytest.approx(sum(items) / 40, abs=1e-12)


def test_sweep_task_refuses_an_unknown_template_key_before_writing(tmp_path, capsys):
    task = arc_easy_local(tmp_path / "work")
    envelope = tmp_path / "envelope.yaml"
    envelope.write_text(TEMPLATED.format(task=task).replace("target_delimiter:", "num_fewshot:"))
    out = tmp_path / "out"
    sweep = ["sweep", "--task", f"lm-eval:{task}", "--envelope", envelope, "--models", "smollm2", "--out", out]
    assert "template 'qa': unknown key 'num_fewshot'" in _refused(capsys, *sweep)
    assert not out.exists()


GENERATED = """# template 'own', scored generate_until, of lm-eval task 'arc_easy_local' (safetyrepro sweep --task; the envelope's `templates`)
include: {task}
task: arc_easy_local__generate_until
output_type: generate_until
doc_to_target: '{{% set c = (choices.text) %}}{{% set t = (choices.label.index(answerKey)) %}}{{{{ c[t] if t is number else t }}}}'
doc_to_choice: null
process_results: !function 'arc_easy_local__generate_until_scores.process_results'
generation_kwargs:
  until:
  - "\\n"
  do_sample: false
  max_gen_toks: 32
metric_list:
- metric: acc
  aggregation: mean
  higher_is_better: true
- metric: parse_rate
  aggregation: mean
  higher_is_better: true
"""  # noqa: E501


def test_the_scoring_axis_derives_a_multiple_choice_tasks_generated_twin(tmp_path):
    """`scoring: [own, generate_until]`: the twin is a task YAML like a template's, its target the right choice's
    text, scored as `acc` (so the importer keeps it in the task's package) and placed in the same benchmark and
    template, its scoring column free_form."""
    from safetyrepro.anytask.envelope import TaskRef
    from safetyrepro.anytask.sweep import mapping_text, task_envelope, write_templates

    task = arc_easy_local(tmp_path / "work")
    envelope = tmp_path / "envelope.yaml"
    envelope.write_text(TEMPLATED.format(task=task).replace("axes:", "axes:\n  scoring: [own, generate_until]"))
    opened, env = task_envelope(TaskRef("lm-eval", str(task)), envelope, None)
    assert len(env.configs()) == 16 and "  scoring: [own, generate_until]\n" in env.text()
    assert env.configs()[-1].run_id == "1shot_nochat_sys-helpful_greedy_tpl-qa_scoring-generate-until"
    out = tmp_path / "out"
    out.mkdir()
    twins = write_templates(out, opened, env)
    assert sorted(p.name for p in (out / "templates").iterdir()) == [
        "arc_easy_local__generate_until.yaml",
        "arc_easy_local__generate_until_scores.py",
        "arc_easy_local__qa.yaml",
        "arc_easy_local__qa__generate_until.yaml",
        "arc_easy_local__qa__generate_until_scores.py",
    ]
    module = (out / "templates" / "arc_easy_local__generate_until_scores.py").read_text()
    assert module.endswith(
        'process_results = Scorer(choices="(choices.text)", target="(choices.label.index(answerKey))")\n'
    )
    page = (Path(__file__).resolve().parents[2] / "docs" / "any_task.md").read_text()
    assert f"```python\n{module}```" in page  # docs/any_task.md shows the module as written
    assert (out / "templates" / "arc_easy_local__generate_until.yaml").read_text() == GENERATED.format(
        task=task.resolve()
    )
    assert mapping_text(opened, env).endswith(
        "- match: arc_easy_local__generate_until\n  benchmark: arc_easy_local\n  template: task\n  metric: acc,none\n"
        "- match: arc_easy_local__qa__generate_until\n  benchmark: arc_easy_local\n  template: qa\n"
        "  metric: acc,none\n"
    )
    twin = twins.variant("qa", "generate_until")
    assert twin.facts().output_type == "generate_until" and twin.facts().generates
    loaded = twin.task_object()
    doc = loaded.eval_docs[0]
    assert (loaded.doc_to_text(doc), loaded.doc_to_target(doc)) == ("Q: What is 3 + 2?\nA:", "5")
    assert loaded.config.output_type == "generate_until" and loaded.config.generation_kwargs["until"] == ["\n"]
    # lm-eval scores a reply through the module beside the YAML: read when it is one of the choices' texts
    said = {r: loaded.process_results(doc, [r]) for r in (" 5.", "7", "I think 5")}
    assert said == {
        " 5.": {"acc": 1.0, "parse_rate": 1.0},
        "7": {"acc": 0.0, "parse_rate": 0.0},
        "I think 5": {"acc": 0.0, "parse_rate": 0.0},
    }


def test_the_generated_twin_is_refused_where_it_cannot_be_derived():
    from safetyrepro.anytask.generated import scores
    from safetyrepro.anytask.lm_eval_task import generated_twin

    assert generated_twin("t", ["no", "yes"], "label", "m")[0]["doc_to_target"].startswith(
        '{% set c = ["no", "yes"] %}{% set t = label %}'
    )
    with pytest.raises(UserError, match="the task's doc_to_choice <function"):
        generated_twin("t", lambda doc: doc["choices"], "label", "m")
    with pytest.raises(UserError, match="the task's doc_to_target '{{a}} or {{b}}' is not one Jinja expression"):
        generated_twin("t", "{{choices}}", "{{a}} or {{b}}", "m")
    text = TEMPLATED.format(task="arc_easy")
    with pytest.raises(UserError, match="scoring 'likelihood'; known: own, generate_until"):
        parse_envelope(text.replace("axes:", "axes:\n  scoring: [own, likelihood]"))
    with pytest.raises(UserError, match="template 'generate_until' is not a plain name"):
        parse_envelope(text.replace("  qa: {", "  generate_until: {").replace("[own, qa]", "[own]"))
    inspect = default_envelope(INSPECT, TaskFacts("t", "generate_until", False)).text()
    with pytest.raises(UserError, match="scoring is an lm-eval task's axis"):
        parse_envelope(inspect.replace("axes:", "axes:\n  scoring: [own, generate_until]"))
    # the choice's text, case, spaces and a closing mark aside; a sign is part of the answer
    choices = ["5", "Paris", "-3", "3"]
    said = [(gold, reply) for gold, reply in [("5", " 5."), ("Paris", "paris"), ("-3", " 3"), ("5", "5, as")]]
    assert [scores(reply, choices, gold) for gold, reply in said] == [
        {"acc": 1.0, "parse_rate": 1.0},
        {"acc": 1.0, "parse_rate": 1.0},
        {"acc": 0.0, "parse_rate": 1.0},  # "3" is another choice: read, and wrong
        {"acc": 0.0, "parse_rate": 0.0},
    ]
