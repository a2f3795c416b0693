"""Property-based tests (hypothesis): no input crashes the label parsers or the grid reader. A parser
returns a valid label index or None for any text; the grid reader either reads a grid or refuses it
with one UserError, whatever bytes the file holds."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmark import after_last_answer_cue, parse_letter
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.subsets import item_set

# replies as models write them: letters, answer cues, refusals, markup, unicode look-alikes, noise
FRAGMENTS = st.sampled_from(
    [
        "A",
        "B",
        "C",
        "D",
        "(B)",
        "B.",
        "Answer:",
        "answer is",
        "Yes",
        "No",
        "yes",
        "no",
        "I'm sorry",
        "I cannot",
        "Sure!",
        "**",
        "\n",
        "\n\n",
        " or ",
        "/",
        "Ｂ",
        "ﬁ",
        "’",
        "\u200b",
        "Option",
        "The answer is",
        "both A and B",
        "None of the above",
        "Answer: Yes",
    ]
)
REPLIES = st.one_of(
    st.text(max_size=300), st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=25).map(" ".join)
)


@settings(max_examples=400, deadline=None)
@given(text=REPLIES, n=st.integers(min_value=1, max_value=26), options=st.lists(st.text(max_size=20), max_size=5))
def test_letter_parser_never_crashes(text, n, options):
    got = parse_letter(text, n, options)
    assert got is None or 0 <= got < n
    cue = after_last_answer_cue(text)
    assert cue is None or isinstance(cue, str)


@pytest.fixture(scope="module")
def first_items(data_dir):
    return {b: item_set(b).items[0] for b in BENCHMARKS}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=REPLIES, template=st.sampled_from(["T1", "T2", "T3", "T4"]))
def test_every_benchmark_parser_returns_a_label_or_none(first_items, text, template):
    for name, item in first_items.items():
        bench = get_benchmark(name)
        got = bench.parse(text, item, template)
        assert got is None or 0 <= got < len(bench.labels(item)), (name, text)


COLUMNS = [
    "model",
    "benchmark",
    "template",
    "decoding",
    "shots",
    "scoring",
    "precision",
    "package",
    "n_items",
    "n_seeds",
    "score",
    "parse_rate",
    "tier",
    "config_id",
    "status",
    "tie_rate",
]
CELL_VALUES = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            "xstest",
            "T1",
            "greedy",
            "logprob",
            "free_form",
            "core",
            "bf16",
            "ok",
            "not_applicable",
            "xstest/T1/greedy/0shot/logprob",
            "0",
            "1",
            "0.5",
            "-1",
        ]
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.fixed_dictionaries({c: CELL_VALUES for c in COLUMNS}), max_size=8),
    drop=st.sets(st.sampled_from(COLUMNS), max_size=3),
)
def test_grid_reader_reads_or_refuses_any_table(tmp_path_factory, rows, drop):
    from safetyrepro.grid.grid_io import load_grid
    from safetyrepro.tasks.envelope import default_rules

    path = tmp_path_factory.mktemp("g") / "grid.csv"
    pd.DataFrame(rows, columns=COLUMNS).drop(columns=sorted(drop)).to_csv(path, index=False)
    try:
        load_grid(path, default_rules())
    except UserError as e:
        assert str(e) and "\n" not in str(e).strip()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2000))
def test_grid_reader_refuses_arbitrary_bytes(tmp_path_factory, data):
    from safetyrepro.grid.grid_io import load_grid
    from safetyrepro.tasks.envelope import default_rules

    path = tmp_path_factory.mktemp("b") / "grid.csv"
    path.write_bytes(data)
    with pytest.raises(UserError):
        load_grid(path, default_rules())


def test_a_valid_grid_still_reads(tmp_path):
    """The property tests above could pass by refusing everything: a real grid must read."""
    from safetyrepro.grid.grid_io import load_grid
    from safetyrepro.tasks.envelope import default_rules

    rules = default_rules()
    rows = [
        {
            "model": m,
            "benchmark": "xstest",
            "template": c.template,
            "decoding": c.decoding,
            "shots": c.shots,
            "scoring": c.scoring,
            "precision": "bf16",
            "package": "lm-eval",
            "n_items": 4,
            "n_seeds": 1,
            "score": s,
            "parse_rate": 1.0,
            "tier": rules.tier(c),
            "config_id": c.config_id,
        }
        for m, s in (("a", 0.25), ("b", 0.75))
        for c in rules.configs("xstest", "conservative_core")
    ]
    buf = io.StringIO()
    pd.DataFrame(rows).to_csv(buf, index=False)
    (tmp_path / "grid.csv").write_text(buf.getvalue())
    grid = load_grid(tmp_path / "grid.csv", rules)
    assert grid.models == ("a", "b") and len(grid.cells) == 8
