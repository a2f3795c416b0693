"""A free-form configuration's cheap twin (the log-probability configuration of the same benchmark, template and
shots), and how well it tracks the free-form configuration in a run's item records: the correlation of the two
configurations' paired differences, what `certify --control auto` can use (plan GRID --certify reads it from a
pilot, perf/certify_control.py from the published records)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS
from safetyrepro.tasks.envelope import Config

from .direction import declared_direction

MIN_ITEMS = 10  # a correlation on fewer common items says little

COLUMNS = ["benchmark", "config_id", "model_a", "model_b", "r", "items"]


def cheap_twin(config_id: str, config_ids: Sequence[str]) -> str | None:
    """The log-probability configuration of the same benchmark, template and shots, if the run has it (none for
    an id that is not benchmark/template/decoding/<k>shot/scoring)."""
    try:
        cfg = Config.from_id(config_id)
    except UserError:
        return None
    if cfg.scoring != "free_form":
        return None
    twin = dataclasses.replace(cfg, decoding="greedy", scoring="logprob").config_id
    return twin if twin in config_ids else None


def pairings(
    ideal: float | None, config_ids: Sequence[str], excluded: Mapping[str, frozenset[str]] | None = None
) -> dict[str, str]:
    """costly configuration -> its cheap twin, for the configurations the control can help (none where better
    means closer to an `ideal` score: its two shares' sequences have no paired difference to control)."""
    if ideal is not None:
        return {}
    excluded = excluded or {}
    out = {}
    for cid in config_ids:
        twin = cheap_twin(cid, config_ids)
        if twin is not None and not excluded.get(cid) and not excluded.get(twin):
            out[cid] = twin
    return out


def closer_to(benchmark: str) -> float | None:
    """The score a better model sits closer to (CrowS-Pairs: 0.5) for a benchmark SafetyRepro defines, else None."""
    return declared_direction(benchmark).target if benchmark in BENCHMARKS else None


def twin_correlations(records: pd.DataFrame) -> pd.DataFrame:
    """Per (free-form configuration with a twin, pair of models): the correlation r of the paired differences
    (seed means) with the twin's on the items all four cells hold, and how many. Pairs with fewer than MIN_ITEMS
    common items, or whose differences never vary, are left out; so are closeness benchmarks (CrowS-Pairs: no
    paired difference to control)."""
    means = records.groupby(["config_id", "model", "item_id"])["item_score"].mean()
    models = sorted(records["model"].astype(str).unique())
    config_ids = sorted(records["config_id"].astype(str).unique())
    out = []
    for benchmark in sorted({c.split("/")[0] for c in config_ids}):
        mine = [c for c in config_ids if c.startswith(benchmark + "/")]
        twins = pairings(closer_to(benchmark), mine)
        for (cid, twin), (a, b) in itertools.product(twins.items(), itertools.combinations(models, 2)):
            try:
                cells = [means.loc[(x, m)] for x in (cid, twin) for m in (a, b)]
            except KeyError:
                continue
            items = sorted(set.intersection(*(set(s.index) for s in cells)))
            d = cells[0].loc[items].to_numpy() - cells[1].loc[items].to_numpy()
            c = cells[2].loc[items].to_numpy() - cells[3].loc[items].to_numpy()
            if len(items) >= MIN_ITEMS and d.std() > 0 and c.std() > 0:
                r = float(np.corrcoef(d, c)[0, 1])
                out.append(dict(zip(COLUMNS, (benchmark, cid, a, b, r, len(items)), strict=True)))
    return pd.DataFrame(out, columns=COLUMNS)
