"""docs/models.md's engine example runs as written on the embedded SmolLM2: a chat prompt rendered, a greedy and a
seeded sampled generation, two continuation log-likelihoods, and the engine's info (issue 57: the docs' example
blocks run)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def test_the_engine_example_of_models_md_runs(smollm2):
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    lines = [line for line in code.strip().splitlines() if line.strip()]
    scope: dict = {}
    # each expression line of the block is kept, so what it shows can be checked
    exec(compile("\n".join(lines[:3]), str(DOC), "exec"), scope)  # noqa: S102 - the page's code
    generated = eval(lines[3].split("  #")[0], scope)  # noqa: S307
    scored = eval(lines[4].split("  #")[0], scope)  # noqa: S307
    info = eval(lines[5].split("  #")[0], scope)  # noqa: S307
    assert len(generated) == 2 and all(isinstance(g, str) and g.strip() for g in generated)
    assert "\n" not in generated[1].strip()  # the sampled request stops at a newline
    assert len(scored) == 2 and all(lp < 0 and math.isfinite(lp) and isinstance(g, bool) for lp, g in scored)
    assert info.label == "smollm2" and info.precision == "bf16"
