"""Which configurations a slice keeps. Membership comes from the rules file's named sub-envelopes
(`rules.subsets`); the one slice that depends on the data, `parse_clean`, is computed here."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from safetyrepro.errors import one_of
from safetyrepro.grid.grid_io import Grid
from safetyrepro.tasks.envelope import Config, Rules

PARSE_CLEAN = "parse_clean"
PARSE_CLEAN_MIN = 0.95  # the paper's threshold: every model parses at least 95 % of items


def slice_names(rules: Rules) -> tuple[str, ...]:
    """The rules file's sub-envelopes in its own order, with parse_clean after logprob (docs/formats.md order)."""
    names = [n for n in rules.subsets if n != PARSE_CLEAN]
    at = names.index("logprob") + 1 if "logprob" in names else len(names)
    return (*names[:at], PARSE_CLEAN, *names[at:])


def check_slices(requested: list[str] | None, rules: Rules) -> tuple[str, ...]:
    """The slices to compute, in canonical order; `full` is always among them (the headline)."""
    known = slice_names(rules)
    if not requested:
        return known
    for name in requested:
        if name not in known:
            raise one_of("slice", name, known)
    return tuple(n for n in known if n in requested or n == "full")


def slice_config_ids(grid: Grid, rules: Rules, benchmark: str, name: str) -> tuple[str, ...]:
    """The benchmark's common configurations that fall in slice `name`, in envelope order."""
    ids = grid.config_ids(benchmark)
    if name == PARSE_CLEAN:
        worst = grid.matrix(benchmark, "parse_rate").min(axis=1)
        return tuple(c for c in ids if worst[c] >= PARSE_CLEAN_MIN)
    return tuple(c for c in ids if rules.in_subset(Config.from_id(c), name))


def slice_matrices(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(benchmark, slice, configs x models score matrix) for every benchmark and non-empty slice."""
    for benchmark in grid.benchmarks:
        for name in slices:
            ids = slice_config_ids(grid, rules, benchmark, name)
            if ids:
                yield benchmark, name, grid.matrix(benchmark, config_ids=ids)


def envelope_scope(grid: Grid, rules: Rules, benchmark: str) -> tuple[bool, str]:
    """(whether the grid holds the benchmark's whole envelope, a phrase naming what it holds), e.g.
    "the full envelope (48 configurations)" or "the logprob sub-envelope (12 of 48 configurations)"."""
    have = set(grid.config_ids(benchmark))
    envelope = [c.config_id for c in rules.configs(benchmark)]
    n, total = len(have), len(envelope)
    if have == set(envelope):
        return True, f"the full envelope ({total} configurations)"
    for name in rules.subsets:
        if name != "full" and have == {c.config_id for c in rules.configs(benchmark, subset=name)}:
            return False, f"the {name} sub-envelope ({n} of {total} configurations)"
    return False, f"{n} of the envelope's {total} configurations"
