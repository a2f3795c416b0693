"""The optional Every Eval Ever environment, .venv-eee (`make eee`): `every-eval-ever` needs Python
>= 3.12 and pulls duckdb and huggingface-hub 1.x, so it lives in a venv of its own and SafetyRepro
calls it in a subprocess: its validator (`python -m every_eval_ever validate`) and its converters
(`python -m every_eval_ever convert helm|lm_eval|inspect`)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from safetyrepro.errors import UserError
from safetyrepro.importers.eee_format import DATA_DIR

ENV = "SAFETYREPRO_EEE_PYTHON"  # another interpreter with every-eval-ever installed


def eee_python() -> Path | None:
    """.venv-eee's python (or $SAFETYREPRO_EEE_PYTHON), when it is there."""
    given = os.environ.get(ENV)
    python = Path(given) if given else Path(__file__).resolve().parents[2] / ".venv-eee" / "bin" / "python"
    return python if python.is_file() and os.access(python, os.X_OK) else None


@dataclass
class ValidationReport:
    returncode: int
    reports: list[dict] = field(default_factory=list)
    stderr: str = ""

    @property
    def ok(self) -> bool:
        """Every file valid with no warning (the validator's exit code 0)."""
        return (
            self.returncode == 0 and bool(self.reports) and all(r["valid"] and not r["warnings"] for r in self.reports)
        )

    def summary(self) -> str:
        if self.ok:
            return f"EEE validator: {len(self.reports)} files valid, no warnings"
        lines = []
        for r in self.reports:
            lines += [f"{r['file']}: error: {e.get('loc')}: {e.get('msg')}" for e in r["errors"]]
            lines += [f"{r['file']}: warning: {w.get('loc')}: {w.get('msg')}" for w in r["warnings"]]
        lines = lines or ([self.stderr.strip()] if self.stderr.strip() else [])
        return f"EEE validator: {len(lines)} problem(s)\n" + "\n".join(f"  {p}" for p in lines[:50])


def validate(out: Path) -> ValidationReport:
    """EEE's validator on every record and samples file under OUT/data/ (its CLI takes fixed-depth
    globs of files below a folder named data: data/<collection>/<developer>/<model>/<file>)."""
    root = Path(out).absolute() / DATA_DIR
    if not root.is_dir():
        raise UserError(f"{out} has no {DATA_DIR}/ folder of EEE records")
    python = eee_python()
    if python is None:
        raise UserError(
            "Every Eval Ever's tools are not installed: run `make eee` (builds .venv-eee with "
            f"every-eval-ever 0.3.0 on Python 3.12), or set {ENV} to a python that has it"
        )
    done = subprocess.run(
        [str(python), "-m", "every_eval_ever", "validate", "--format", "json", str(root / "*" / "*" / "*" / "*.json*")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        reports = json.loads(done.stdout)
    except ValueError:
        reports = []
    return ValidationReport(done.returncode, reports if isinstance(reports, list) else [], done.stderr)
