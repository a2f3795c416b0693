"""The embedded models: each names its upstream and licence, each (joined) weight file is pinned to a
sha256 that is checked whenever the file is taken, and docs/models.md says the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from safetyrepro.adapters.catalogue.weights import EMBEDDED, ModelSpec, _checked_pin
from safetyrepro.errors import UserError

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


@pytest.mark.parametrize("label", EMBEDDED)
def test_every_embedded_model_has_a_pin_an_upstream_and_a_licence(label):
    spec = EMBEDDED[label]
    assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256 or ""), f"{label}: no pinned sha256"
    assert spec.upstream.count("/") == 1 and spec.licence and spec.package_licence
    row = next(line for line in DOC.read_text().splitlines() if line.startswith(f"| `{label}` |"))
    assert spec.sha256 in row and spec.upstream in row


def test_a_file_that_is_not_the_pinned_one_is_refused(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    good = ModelSpec(
        "toy", "Toy", "org/toy", (("toy-part1", "1.0"),), "m.gguf", False, False, "1", "MIT", sha256="a" * 64
    )
    with pytest.raises(UserError, match=r"toy weights .*m\.gguf have sha256 [0-9a-f]{64}, expected a{64}"):
        _checked_pin(good, f)
    import hashlib

    right = ModelSpec(*good.__dict__.values())
    object.__setattr__(right, "sha256", hashlib.sha256(f.read_bytes()).hexdigest())
    assert _checked_pin(right, f) == f
