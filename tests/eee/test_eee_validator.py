"""What `export eee` writes passes Every Eval Ever's own validator (every_eval_ever 0.3.0's
`python -m every_eval_ever validate`, run in .venv-eee by safetyrepro.eee.venv): skipped, with the
reason, where .venv-eee has not been built (`make eee`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from eee_grids import write_grid

from safetyrepro.cli import main
from safetyrepro.eee.venv import eee_python, validate

pytestmark = [
    pytest.mark.needs_setup,
    pytest.mark.skipif(
        eee_python() is None,
        reason=".venv-eee is absent: `make eee` builds it (every-eval-ever 0.3.0 on Python 3.12) for EEE's validator",
    ),
]

FIXTURE = Path(__file__).parent / "fixtures" / "helm_eee"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("eee-valid")
    grid = write_grid(root / "run")
    assert main(["export", "eee", str(grid), "--out", str(root / "eee")]) == 0
    return root / "eee"


def test_every_exported_record_and_samples_file_passes_eees_validator(exported):
    report = validate(exported)
    assert report.ok, report.summary()
    files = sorted(p for p in (exported / "data").rglob("*") if p.is_file())
    assert {Path(r["file"]).resolve() for r in report.reports} == {p.resolve() for p in files}
    assert {r["file_type"] for r in report.reports} == {"aggregate", "instance"}


def test_the_validator_does_see_a_broken_record(exported, tmp_path):
    """The check is not vacuous: a record without model_info.id, and a samples file whose row count
    disagrees with its record, fail it."""
    copy = tmp_path / "eee"
    shutil.copytree(exported, copy)
    record = sorted((copy / "data").rglob("*.json"))[0]
    data = json.loads(record.read_text())
    del data["model_info"]["id"]
    record.write_text(json.dumps(data))
    samples = sorted((copy / "data").rglob("*_samples.jsonl"))[-1]
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[1:]))
    report = validate(copy)
    assert not report.ok
    failed = {Path(r["file"]).name for r in report.reports if not r["valid"]}
    assert {record.name, samples.name} <= failed


def test_export_validate_flag_runs_the_validator(exported, tmp_path, capsys):
    grid = write_grid(tmp_path / "run", n_items=4, benchmarks=("truthfulqa",))
    assert main(["export", "eee", str(grid), "--out", str(tmp_path / "eee"), "--validate"]) == 0
    assert "files valid, no warnings" in capsys.readouterr().out


def test_the_committed_helm_fixture_passes_eees_validator():
    report = validate(FIXTURE)
    assert report.ok, report.summary()
    assert len(report.reports) == 12
