"""Configuration-bootstrap ranges for the per-benchmark maxima (rho_flip max over pairs, SDI max over
models). Configurations are drawn with replacement; every model's score on a drawn configuration
comes along, so the pairing is kept. These ranges describe sensitivity to which configurations
are in the envelope; they are not uncertainty over items or models (paper App. G)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.rank_flip import PAIR_BLOCK, pair_columns

FULL = "full"


@dataclass(frozen=True)
class BootstrapRange:
    benchmark: str
    statistic: str
    point: float
    low: float  # 2.5th percentile
    high: float  # 97.5th percentile
    n_resamples: int
    seed: int


def draw_weights(draws: np.ndarray, n: int) -> np.ndarray:
    """resamples x n: how many times each resample (a row of `draws`, indices into n) draws each index."""
    rows = np.arange(len(draws))[:, None] * n
    return np.bincount((rows + draws).ravel(), minlength=len(draws) * n).reshape(len(draws), n).astype(float)


def _rho_max(x: np.ndarray, weights: np.ndarray, models: tuple[str, ...]) -> np.ndarray:
    """rho_flip max over pairs on each resample, a resample given by how many times it draws each
    configuration (resamples x configs): N+ of a pair is the weighted count of the configurations
    where A is strictly ahead, so all resamples come from one configs x pairs sign table and a
    product (whole numbers below 2^53, exact in floating point)."""
    n_cfg = weights.sum(axis=1)
    i, j = pair_columns(models)
    best = np.zeros(len(weights))
    for start in range(0, len(i), PAIR_BLOCK):
        a, b = x[:, i[start : start + PAIR_BLOCK]], x[:, j[start : start + PAIR_BLOCK]]
        plus, minus = weights @ (a > b).astype(float), weights @ (a < b).astype(float)
        best = np.maximum(best, np.minimum(plus, minus).max(axis=1))
    return best / n_cfg


def _sdi_max(sample: np.ndarray) -> np.ndarray:
    mean = sample.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sdi = (sample.max(axis=1) - sample.min(axis=1)) / np.where(mean > 0, mean, np.nan)
    sdi = np.where(np.isnan(sdi), -np.inf, sdi).max(axis=1)  # a model with mean 0 has no SDI
    return np.where(np.isfinite(sdi), sdi, np.nan)


def maxima(sample: np.ndarray, models: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(rho_flip max over pairs, SDI max over models) of each resample x configs x models slab."""
    n_cfg = sample.shape[1]
    i, j = pair_columns(models)
    rho = np.zeros(sample.shape[0])
    step = max(1, PAIR_BLOCK // max(1, n_cfg))
    for start in range(0, len(i), step):
        a, b = sample[:, :, i[start : start + step]], sample[:, :, j[start : start + step]]
        minority = np.minimum(np.count_nonzero(a > b, axis=1), np.count_nonzero(a < b, axis=1))
        rho = np.maximum(rho, minority.max(axis=1, initial=0) / n_cfg)
    return rho, _sdi_max(sample)


def bootstrap_table(matrices: dict[str, pd.DataFrame], n_resamples: int, seed: int) -> pd.DataFrame:
    """One row per benchmark x statistic; `matrices` maps benchmark -> full-slice configs x models."""
    rows = []
    for benchmark, m in matrices.items():
        models = tuple(m.columns)
        x = m.to_numpy(dtype=float)
        # one stream per benchmark, so adding a benchmark does not move the others' ranges
        rng = np.random.default_rng([seed, zlib.crc32(benchmark.encode())])
        draws = rng.integers(0, len(x), size=(n_resamples, len(x)))
        weights = draw_weights(draws, len(x))
        rho, sdi = _rho_max(x, weights, models), _sdi_max(x[draws])
        point_rho, point_sdi = (float(v[0]) for v in maxima(x[None], models))
        for stat, point, values in (("rho_flip_max", point_rho, rho), ("sdi_max", point_sdi, sdi)):
            finite = values[np.isfinite(values)]
            lo, hi = np.percentile(finite, [2.5, 97.5]) if len(finite) else (np.nan, np.nan)
            rows.append(BootstrapRange(benchmark, stat, point, float(lo), float(hi), n_resamples, seed))
    return pd.DataFrame([r.__dict__ for r in rows])
