"""grid/twins.py: how well a free-form configuration's log-probability twin tracks it in item records."""

from __future__ import annotations

import numpy as np
import pandas as pd

from safetyrepro.grid.twins import twin_correlations

FREE, TWIN = "bbq/T1/greedy/0shot/free_form", "bbq/T1/greedy/0shot/logprob"


def _records(scores: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    return pd.concat(
        pd.DataFrame(
            {"model": m, "config_id": c, "item_id": [f"i{k}" for k in range(len(x))], "seed": 0, "item_score": x}
        )
        for (c, m), x in scores.items()
    )


def test_the_twins_correlation_is_that_of_the_two_paired_differences_worked_by_hand():
    # 12 items: free-form differences d = a - b and the twin's c; r = cov(d, c) / (sd d sd c) by hand
    fa = [1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0]
    fb = [0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1]
    la = [1, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 0]
    lb = [0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1]
    d = np.subtract(fa, fb)  # 1 0 0 -1 1 0 0 1 0 1 0 -1
    c = np.subtract(la, lb)  # 1 0 -1 -1 1 0 -1 1 0 0 0 -1
    # means 2/12 and -1/12; sum of d c = 1 + 1 + 1 + 1 + 1 = 5 (items 0, 3, 4, 7, 11); cov = 5/12 - (2/12)(-1/12)
    cov = 5 / 12 + 2 / 144
    var_d, var_c = 6 / 12 - (2 / 12) ** 2, 7 / 12 - (1 / 12) ** 2
    frame = _records({(FREE, "a"): fa, (FREE, "b"): fb, (TWIN, "a"): la, (TWIN, "b"): lb})
    (row,) = twin_correlations(frame).itertuples()
    assert (row.benchmark, row.config_id, row.model_a, row.model_b, row.items) == ("bbq", FREE, "a", "b", 12)
    assert np.isclose(row.r, cov / np.sqrt(var_d * var_c)) and np.isclose(row.r, np.corrcoef(d, c)[0, 1])


def test_too_few_items_no_twin_and_a_closeness_benchmark_give_no_correlation():
    x = [1, 0, 1, 0, 1, 1, 0, 0, 1]  # 9 common items: under MIN_ITEMS
    y = [0, 0, 1, 1, 1, 0, 0, 1, 0]
    assert twin_correlations(_records({(FREE, "a"): x, (FREE, "b"): y, (TWIN, "a"): x, (TWIN, "b"): y})).empty
    x, y = x + [1, 0, 1], y + [0, 1, 1]
    assert len(twin_correlations(_records({(FREE, "a"): x, (FREE, "b"): y, (TWIN, "a"): x, (TWIN, "b"): y}))) == 1
    assert twin_correlations(_records({(FREE, "a"): x, (FREE, "b"): y})).empty  # no twin in the records
    crows = {(cid.replace("bbq", "crows_pairs"), m): v for (cid, m), v in {(FREE, "a"): x, (FREE, "b"): y}.items()}
    crows |= {(TWIN.replace("bbq", "crows_pairs"), m): v for m, v in (("a", x), ("b", y))}
    assert twin_correlations(_records(crows)).empty  # closeness to 0.5: no paired difference to control
