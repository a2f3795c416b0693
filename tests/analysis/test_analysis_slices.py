import pytest
from analysis_grids import grid_frame, to_grid

from safetyrepro.analysis.metrics.slices import check_slices, slice_config_ids, slice_names
from safetyrepro.errors import UserError

PAPER_SIZES = {  # slice -> (configs per non-pair benchmark, configs for CrowS-Pairs)
    "full": (48, 12),
    "core": (27, 9),
    "excl_t4": (36, 9),
    "excl_diverse": (36, 12),
    "free_form": (36, 0),
    "logprob": (12, 12),
    "conservative_core": (4, 2),
}


@pytest.fixture(scope="module")
def full_grid(rules):
    configs = [c.config_id for c in rules.configs()]
    low = {("b", c) for c in configs if c.startswith("toxigen/") and "/T4/" in c}  # 9 free-form + 3 logprob cells
    parse = {("b", c): 0.94 for _, c in low}
    return to_grid(grid_frame({m: {c: 0.2 + 0.003 * i for i, c in enumerate(configs)} for m in ("a", "b")}, parse))


def test_slice_names_follow_the_design_order(rules):
    assert slice_names(rules) == (
        "full",
        "core",
        "excl_t4",
        "excl_diverse",
        "free_form",
        "logprob",
        "parse_clean",
        "conservative_core",
    )


def test_slices_have_the_papers_sizes_on_a_full_envelope_grid(rules, full_grid):
    for name, (main, crows) in PAPER_SIZES.items():
        for benchmark in full_grid.benchmarks:
            expected = crows if benchmark == "crows_pairs" else main
            assert len(slice_config_ids(full_grid, rules, benchmark, name)) == expected, (name, benchmark)


def test_parse_clean_drops_configs_where_any_model_parses_below_095(rules, full_grid):
    assert len(slice_config_ids(full_grid, rules, "toxigen", "parse_clean")) == 36
    assert len(slice_config_ids(full_grid, rules, "xstest", "parse_clean")) == 48


def test_unknown_slice_names_the_allowed_ones(rules):
    with pytest.raises(UserError, match="unknown slice 'tiny'; allowed: full, core"):
        check_slices(["tiny"], rules)
    assert check_slices(["logprob", "full"], rules) == ("full", "logprob")
    assert check_slices(["conservative_core"], rules) == ("full", "conservative_core")  # the headline needs full
