"""Configuration-bootstrap ranges for the per-benchmark maxima (rho_flip max over pairs, SDI max over
models). Configurations are drawn with replacement; every model's score on a drawn configuration
comes along, so the pairing is kept. These ranges describe sensitivity to which configurations
are in the envelope; they are not uncertainty over items or models (paper App. G)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .rank_flip import model_pairs

FULL = "full"


@dataclass(frozen=True)
class BootstrapRange:
    benchmark: str
    statistic: str
    point: float
    low: float   # 2.5th percentile
    high: float  # 97.5th percentile
    n_resamples: int
    seed: int


def maxima(sample: np.ndarray, models: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(rho_flip max over pairs, SDI max over models) of each resample x configs x models slab."""
    n_cfg = sample.shape[1]
    col = {m: i for i, m in enumerate(models)}
    rho = np.zeros(sample.shape[0])
    for a, b in model_pairs(models):
        diff = sample[:, :, col[a]] - sample[:, :, col[b]]
        minority = np.minimum((diff > 0).sum(axis=1), (diff < 0).sum(axis=1))
        rho = np.maximum(rho, minority / n_cfg)
    mean = sample.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sdi = (sample.max(axis=1) - sample.min(axis=1)) / np.where(mean > 0, mean, np.nan)
    sdi = np.where(np.isnan(sdi), -np.inf, sdi).max(axis=1)  # a model with mean 0 has no SDI
    return rho, np.where(np.isfinite(sdi), sdi, np.nan)


def bootstrap_table(matrices: dict[str, pd.DataFrame], n_resamples: int, seed: int) -> pd.DataFrame:
    """One row per benchmark x statistic; `matrices` maps benchmark -> full-slice configs x models."""
    rows = []
    for benchmark, m in matrices.items():
        models = tuple(m.columns)
        x = m.to_numpy(dtype=float)
        # one stream per benchmark, so adding a benchmark does not move the others' ranges
        rng = np.random.default_rng([seed, zlib.crc32(benchmark.encode())])
        rho, sdi = maxima(x[rng.integers(0, len(x), size=(n_resamples, len(x)))], models)
        point_rho, point_sdi = (float(v[0]) for v in maxima(x[None], models))
        for stat, point, values in (("rho_flip_max", point_rho, rho), ("sdi_max", point_sdi, sdi)):
            finite = values[np.isfinite(values)]
            lo, hi = np.percentile(finite, [2.5, 97.5]) if len(finite) else (np.nan, np.nan)
            rows.append(BootstrapRange(benchmark, stat, point, float(lo), float(hi), n_resamples, seed))
    return pd.DataFrame([r.__dict__ for r in rows])

