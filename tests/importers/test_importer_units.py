"""The importers' pure parts: the mapping file, axis names from recorded settings, and the rules
file an import writes (which slices its new values join)."""

from __future__ import annotations

import hashlib

import pytest
from lm_eval_fixtures import write_run

from safetyrepro.errors import UserError
from safetyrepro.importers.lm_eval_runs import choose_metric
from safetyrepro.importers.mapping import (
    decoding_spec,
    decorated_template,
    model_label,
    parse_mapping,
    place_task,
)
from safetyrepro.tasks.envelope import RULES_PATH, Config, default_rules, parse_rules

RULES = default_rules()


@pytest.mark.parametrize(
    "text, message",
    [
        (b"tasks: [{match: x, benchmark: b}]", "lacks 'template'"),
        (b"tasks: [{match: '(', benchmark: b, template: t}]", "not a regular expression"),
        (b"tasks: [{match: x, benchmark: b, template: t, colour: red}]", "unknown key 'colour'"),
        (b"tasks: [{match: x, benchmark: b, template: t, scoring: mc}]", "scoring 'mc'"),
        (b"models: [{match: x}]", "match and label"),
        (b"task: []", "unknown key 'task'"),
        (b"tasks: [oops", "not valid YAML"),
    ],
)
def test_a_bad_mapping_file_is_one_line_naming_the_entry(text, message):
    with pytest.raises(UserError, match=message):
        parse_mapping(text, "m.yaml")


def test_tasks_are_placed_by_safetyrepro_names_or_the_mapping_and_never_guessed():
    mapping = parse_mapping(
        b'tasks:\n  - {match: "quiz_(v\\\\d)", benchmark: quiz, template: "p-\\\\1", stress: true}\n'
        b'  - {match: "bad", benchmark: "a/b", template: t}\n'
    )
    p = place_task("safetyrepro_bbq_t3_gen", mapping, "lm-eval")
    assert (p.benchmark, p.template, p.scoring, p.safetyrepro) == ("bbq", "T3", "free_form", True)
    assert place_task("safetyrepro_crows_pairs_t4", mapping, "lm-eval").stress
    p = place_task("quiz_v2", mapping, "lm-eval")
    assert (p.benchmark, p.template, p.stress, p.safetyrepro) == ("quiz", "p-v2", True, False)
    assert "not a plain name" in place_task("bad", mapping, "lm-eval")
    assert "no entry of the mapping file" in place_task("safetyrepro_nope_t1", mapping, "lm-eval")
    assert "no entry of the mapping file" in place_task("arc_easy", mapping, "lm-eval")
    p = place_task("safetyrepro/toxigen", mapping, "inspect", {"template": "T2"})
    assert (p.benchmark, p.template) == ("toxigen", "T2")
    assert "does not define" in place_task("safetyrepro/toxigen", mapping, "inspect", {"template": "T9"})


def test_decodings_are_named_by_their_settings():
    assert decoding_spec(0.0, 0.9, True, RULES).name == "greedy"
    assert decoding_spec(0.7, 0.9, None, RULES).name == "diverse"
    assert decoding_spec(0.3, 0.9, True, RULES).name == "moderate"
    assert decoding_spec(0.3, 1.0, True, RULES).name == "t0.3-p1"
    assert decoding_spec(0.8, None, False, RULES).name == "greedy"  # no sampling: the temperature does nothing
    assert decoding_spec(None, None, None, RULES).name == "greedy"
    spec = decoding_spec(None, None, None, RULES, provider_default=True)
    assert (spec.name, spec.recorded) == ("provider-default", False)


def test_templates_say_how_the_prompt_differed():
    t = dict(chat_applied=True, model_has_chat=True, system_text=None, fewshot_as_multiturn=True, shots=3)
    assert decorated_template("T1", **t) == "T1"
    assert decorated_template("T1", **{**t, "chat_applied": False}) == "T1+nochat"
    assert decorated_template("T1", **{**t, "chat_applied": False, "model_has_chat": False}) == "T1"
    assert decorated_template("T1", **{**t, "fewshot_as_multiturn": False}) == "T1+oneturn"
    assert decorated_template("T1", **{**t, "fewshot_as_multiturn": False, "shots": 0}) == "T1"
    assert decorated_template("T2", **{**t, "system_text": "Be safe."}).startswith("T2+sys=")
    assert (
        decorated_template("qa", **t, args={"style": "terse", "path": "/a b/c"})
        == f"qa+path=h{hashlib.sha256(b'/a b/c').hexdigest()[:8]}+style=terse"
    )


def test_model_labels():
    assert model_label("safetyrepro", {"model": "smollm2"}, "x") == "smollm2"
    assert model_label("hf", {"pretrained": "org/m", "revision": "abc", "dtype": "bfloat16"}, None) == "hf:org/m@abc"
    assert model_label("vllm", {"pretrained": "m", "peft": "/ad"}, None) == "vllm:m+peft:/ad"


def test_the_primary_metric_is_the_first_reported_one():
    entry = {"alias": "t", "acc_norm,none": 0.4, "acc_norm_stderr,none": 0.1, "acc,none": 0.3}
    assert choose_metric(entry, None) == "acc_norm,none"
    assert choose_metric(entry, "acc") == "acc,none"
    assert choose_metric(entry, "acc,none") == "acc,none"
    assert choose_metric(entry, "f1") is None


def test_new_values_join_the_slices_their_base_or_their_tier_allows(tmp_path):
    from safetyrepro.importers import import_lm_eval

    runs = tmp_path / "runs"
    gen = dict(task="safetyrepro_xstest_t2_gen", output_type="generate_until")
    write_run(runs, scores=[1.0, 0.0], i=0, folder="a", chat=False)  # T1+nochat
    write_run(runs, scores=[1.0, 0.0], i=1, folder="b", gen_kwargs={"temperature": 0.5, "do_sample": True}, **gen)
    write_run(runs, scores=[1.0, 0.0], i=2, folder="c", gen_kwargs={"temperature": 0.9, "do_sample": True}, **gen)
    write_run(runs, scores=[1.0, 0.0], i=3, folder="d", task="safetyrepro_xstest_t4", chat=False)  # T4+nochat
    write_run(runs, scores=[1.0, 0.0], i=4, folder="e", shots=1)
    imported = import_lm_eval([str(runs)])
    rules = parse_rules(imported.rules_text, "rules.yaml")
    tiers = dict(zip(imported.grid["config_id"], imported.grid["tier"], strict=True))
    assert tiers == {
        "xstest/T1+nochat/greedy/0shot/logprob": "core",
        "xstest/T2/t0.5-p1/0shot/free_form": "core",
        "xstest/T2/t0.9-p1/0shot/free_form": "stress",
        "xstest/T4+nochat/greedy/0shot/logprob": "stress",
        "xstest/T1/greedy/1shot/logprob": "core",
    }

    def slices(cid: str) -> set[str]:
        return {s for s in rules.subsets if rules.in_subset(Config.from_id(cid), s)}

    assert slices("xstest/T1+nochat/greedy/0shot/logprob") == {
        "full",
        "core",
        "excl_t4",
        "excl_diverse",
        "logprob",
        "conservative_core",
    }
    assert slices("xstest/T2/t0.5-p1/0shot/free_form") == {"full", "core", "excl_t4", "excl_diverse", "free_form"}
    assert slices("xstest/T2/t0.9-p1/0shot/free_form") == {"full", "excl_t4", "free_form"}
    assert slices("xstest/T4+nochat/greedy/0shot/logprob") == {"full", "excl_diverse", "logprob"}
    assert slices("xstest/T1/greedy/1shot/logprob") == {"full", "core", "excl_t4", "excl_diverse", "logprob"}
    # the packaged configurations keep their packaged slices
    for cfg in default_rules().configs("xstest"):
        assert slices(cfg.config_id) == {s for s in RULES.subsets if RULES.in_subset(cfg, s)}


def test_a_rules_file_may_name_external_benchmarks_but_not_registered_ones():
    text = RULES_PATH.read_bytes()
    rules = parse_rules(text + b"\nexternal_benchmarks: [arc_easy]\n")
    assert rules.benchmarks[-1] == "arc_easy" and rules.configs("arc_easy")
    with pytest.raises(UserError, match="is a registered benchmark"):
        parse_rules(text + b"\nexternal_benchmarks: [bbq]\n")
    with pytest.raises(UserError, match="not a plain name"):
        parse_rules(text + b"\nexternal_benchmarks: ['a/b']\n")


def test_a_run_scored_a_way_its_benchmark_does_not_define_is_listed_not_placed(tmp_path):
    from safetyrepro.importers import import_lm_eval

    runs = tmp_path / "runs"
    write_run(runs, scores=[1.0, 0.0], task="cp_gen", output_type="generate_until", weights=None)
    write_run(runs, scores=[1.0, 1.0], task="cp_ll", weights=None, i=1)
    mapping = tmp_path / "m.yaml"
    mapping.write_text(
        "tasks:\n  - {match: cp_gen, benchmark: crows_pairs, template: gen}\n"
        "  - {match: cp_ll, benchmark: crows_pairs, template: ll}\n"
    )
    imported = import_lm_eval([str(runs)], mapping=str(mapping))
    assert imported.grid["config_id"].tolist() == ["crows_pairs/ll/greedy/0shot/logprob"]
    assert imported.unmapped["task"].tolist() == ["cp_gen"]
    assert "scores logprob only" in imported.unmapped["reason"].iloc[0]
