"""Shared test set-up: the benchmark mirror, and no network for benchmark data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"

if not os.environ.get("SAFETYREPRO_DATA_DIR") and SHARED_DATA.is_dir():
    os.environ["SAFETYREPRO_DATA_DIR"] = str(SHARED_DATA)
os.environ.setdefault("SAFETYREPRO_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = os.environ.get("SAFETYREPRO_DATA_DIR")
    if not d or not Path(d).is_dir():
        pytest.fail("set SAFETYREPRO_DATA_DIR to a benchmark mirror laid out like shared/data (README: Data)")
    return Path(d)
