"""The rules file: sizes as the paper states them, the hash as a commit stamp, clear errors."""

from __future__ import annotations

import pytest

from safetyrepro.errors import UserError
from safetyrepro.tasks.envelope import RULES_PATH, Config, load_rules, parse_rules

RULES = load_rules()
PAPER_BENCHMARKS = ("truthfulqa", "bbq", "crows_pairs", "toxigen", "xstest")
PAPER_SIZES = {  # subset: (non-CrowS benchmark, CrowS-Pairs)  -- PAPER.md "Envelope sizes"
    "full": (48, 12),
    "core": (27, 9),
    "excl_t4": (36, 9),
    "excl_diverse": (36, 12),
    "conservative_core": (4, 2),
    "free_form": (36, 0),
    "logprob": (12, 12),
}


@pytest.mark.parametrize("subset", PAPER_SIZES)
def test_envelope_sizes_match_the_paper(subset):
    other, crows = PAPER_SIZES[subset]
    for b in ("truthfulqa", "bbq", "toxigen", "xstest"):
        assert len(RULES.configs(b, subset)) == other
    assert len(RULES.configs("crows_pairs", subset)) == crows


def test_612_cells_for_three_models_and_tiers():
    assert 3 * sum(len(RULES.configs(b)) for b in PAPER_BENCHMARKS) == 612
    tiers = [RULES.tier(c) for c in RULES.configs("bbq")]
    assert tiers.count("core") == 27 and tiers.count("stress") == 21


def test_constraints_hold_on_every_config():
    for c in RULES.configs():
        assert c.scoring != "logprob" or c.decoding == "greedy"
        assert c.benchmark != "crows_pairs" or c.scoring == "logprob"


def test_config_id_round_trips_and_is_readable():
    c = Config("bbq", "T3", "greedy", 3, "logprob")
    assert c.config_id == "bbq/T3/greedy/3shot/logprob"
    assert Config.from_id(c.config_id) == c


def test_editing_a_rules_value_changes_the_hash():
    text = RULES_PATH.read_bytes()
    edited = text.replace(b"moderate: {temperature: 0.3", b"moderate: {temperature: 0.35")
    assert edited != text
    assert parse_rules(edited).sha256 != parse_rules(text).sha256 == RULES.sha256


@pytest.mark.parametrize(
    "old,new,message",
    [
        (b"template: [T1, T2, T3, T4]", b"template: [T1, T2, T3, T9]", "decoding"),  # T9 stress entry unknown
        (b"when: {scoring: [logprob]}", b"when: {scoring: [logprobz]}", "unknown scoring value 'logprobz'"),
        (b"require: {decoding: [greedy]}", b"require: {decodingz: [greedy]}", "unknown axis 'decodingz'"),
        # crows_pairs' definition scores logprob only: a rules file cannot make it free-form-only
        (
            b"require: {scoring: [logprob]}",
            b"require: {scoring: [free_form]}",
            "the constraints leave no configuration for benchmark 'crows_pairs'",
        ),
    ],
)
def test_broken_rules_are_refused_with_the_bad_value(old, new, message):
    text = RULES_PATH.read_bytes()
    assert old in text
    broken = text.replace(old, new)
    if old.startswith(b"template"):
        broken = broken.replace(b"template: [T4]", b"template: [T4x]")
        message = "unknown template value 'T4x'"
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        parse_rules(broken)


def test_a_benchmark_definition_restricts_scoring_without_a_rules_line():
    """The rules file's crows_pairs line removed: the definition (scorings = logprob) still keeps its 12
    logprob configurations, and the constraint says where it comes from."""
    text = RULES_PATH.read_bytes()
    line = (
        b"  - name: crows_pairs is logprob-only\n"
        b"    when: {benchmark: [crows_pairs]}\n"
        b"    require: {scoring: [logprob]}\n"
    )
    assert line in text
    rules = parse_rules(text.replace(line, b""))
    assert len(rules.configs("crows_pairs")) == 12 and len(rules.configs("bbq")) == 48
    with pytest.raises(UserError, match=r"crows_pairs scores logprob only \(its definition\)"):
        rules.check(Config("crows_pairs", "T1", "greedy", 0, "free_form"))


def test_check_names_the_broken_constraint():
    with pytest.raises(UserError, match="logprob is greedy-only"):
        RULES.check(Config("bbq", "T1", "moderate", 0, "logprob"))
    with pytest.raises(UserError, match="crows_pairs is logprob-only"):
        RULES.check(Config("crows_pairs", "T1", "greedy", 0, "free_form"))
    with pytest.raises(UserError, match="unknown template 'T7'"):
        RULES.check(Config("bbq", "T7", "greedy", 0, "free_form"))


def test_sampled_decodings_run_five_seeds():
    assert len(RULES.seeds("moderate")) == len(RULES.seeds("diverse")) == 5
    assert len(RULES.seeds("greedy")) == 1


def test_the_envelope_covers_every_registered_benchmark_unless_the_rules_narrow_it():
    from safetyrepro.tasks.benchmarks.registry import BENCHMARKS

    assert RULES.benchmarks == BENCHMARKS
    narrowed = RULES_PATH.read_bytes() + b"\nbenchmarks: [bbq, xstest]\n"
    assert parse_rules(narrowed).benchmarks == ("bbq", "xstest")
    with pytest.raises(UserError, match="unknown benchmark 'bqq'; registered: truthfulqa, bbq"):
        parse_rules(RULES_PATH.read_bytes() + b"\nbenchmarks: [bqq]\n")
