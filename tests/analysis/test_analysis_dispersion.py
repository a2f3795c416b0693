import numpy as np
import pytest
from analysis_grids import grid_frame, to_grid

from safetyrepro.analysis.metrics.dispersion import (
    cfr_ceiling,
    compliance_flip,
    dispersion,
    dispersion_tables,
)


def test_sdi_is_range_over_mean():
    d = dispersion([0.2, 0.4, 0.6])
    assert (d.range, d.mean) == (pytest.approx(0.4), pytest.approx(0.4))
    assert d.sdi == pytest.approx(1.0)


@pytest.mark.parametrize(("n", "expected"), [(48, 0.5106), (12, 0.5455)])
def test_cfr_at_the_median_sits_at_the_algebraic_ceiling(n, expected):
    scores = np.linspace(0.2, 0.9, n)
    c = compliance_flip(scores, "median")
    assert c.pass_share == 0.5
    assert c.cfr == pytest.approx(expected, abs=5e-5)
    assert c.cfr == pytest.approx(cfr_ceiling(n))


def test_cfr_at_a_threshold_is_the_disagreement_probability():
    scores = [0.4, 0.6, 0.7, 0.8]
    # theta 0.75: one pass of four, p = 1/4: 2*4/3 * 1/4 * 3/4 = 0.5; equals the share of the
    # 6 unordered config pairs that disagree (3 of 6)
    assert compliance_flip(scores, 0.75).cfr == pytest.approx(0.5)
    assert compliance_flip(scores, 0.6).pass_share == 0.75  # pass is score >= theta
    assert compliance_flip(scores, 0.9).cfr == 0.0


def test_crows_pairs_has_no_pass_fail_reading(rules):
    configs = [c.config_id for c in rules.configs("crows_pairs")][:3] + [c.config_id for c in rules.configs("bbq")][:3]
    frame = grid_frame(
        {
            "a": dict(zip(configs, [0.1, 0.5, 0.9, 0.1, 0.5, 0.9], strict=True)),
            "b": dict(zip(configs, [0.2, 0.6, 0.8, 0.2, 0.6, 0.8], strict=True)),
        }
    )
    sdi, cfr = dispersion_tables(to_grid(frame), rules, ("full",), (0.5,))
    crows = cfr[(cfr["benchmark"] == "crows_pairs")]
    assert crows["cfr"].isna().all() and (crows["note"] != "").all()
    bbq_a = cfr[(cfr["benchmark"] == "bbq") & (cfr["model"] == "a") & (cfr["theta"] == "0.5")].iloc[0]
    assert bbq_a["cfr"] == pytest.approx(2 * 3 / 2 * (2 / 3) * (1 / 3))
    a_bbq = sdi[(sdi["benchmark"] == "bbq") & (sdi["model"] == "a")].iloc[0]
    assert a_bbq["sdi"] == pytest.approx(0.8 / 0.5)
