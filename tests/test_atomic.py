"""The one write helper (safetyrepro/atomic.py): whole files, inside the folder given, never through a link."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from safetyrepro.atomic import (
    atomic_write,
    ensure_dir,
    open_text_nofollow,
    refuse_links_under,
    remove_within,
)
from safetyrepro.errors import UserError


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def outside(tmp_path) -> Path:
    d = tmp_path / "outside"
    (d / "dir").mkdir(parents=True)
    (d / "precious.txt").write_text("not yours\n")
    (d / "dir" / "keep.txt").write_text("keep me\n")
    return d


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path, outside):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(outside / "precious.txt")
    before = _sha(outside / "precious.txt")
    atomic_write(out / "report.md", "# new\n", root=out)
    assert not (out / "report.md").is_symlink() and (out / "report.md").read_text() == "# new\n"
    assert _sha(outside / "precious.txt") == before


def test_a_linked_folder_on_the_way_is_refused(tmp_path, outside):
    out = tmp_path / "out"
    out.mkdir()
    (out / "figures").symlink_to(outside / "dir")
    with pytest.raises(UserError, match=r"figures is a symbolic link; .* remove the link"):
        atomic_write(out / "figures" / "a.png", b"png", root=out)
    with pytest.raises(UserError, match="figures is a symbolic link"):
        ensure_dir(out / "figures" / "sub", root=out)
    with pytest.raises(UserError, match="figures is a symbolic link"):
        remove_within(out / "figures" / "keep.txt", out)
    with pytest.raises(UserError, match="figures is a symbolic link"):
        open_text_nofollow(out / "figures" / "log.txt", "a", root=out)
    assert sorted(p.name for p in (outside / "dir").iterdir()) == ["keep.txt"]


def test_writes_stay_inside_the_root(tmp_path):
    with pytest.raises(UserError, match="outside"):
        atomic_write(tmp_path / "a" / ".." / ".." / "x.txt", "x", root=tmp_path / "a")


def test_whole_or_nothing_with_a_plain_file_mode(tmp_path):
    out = tmp_path / "out"
    atomic_write(out / "sub" / "t.csv", "a,b\n", root=out)
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert (out / "sub" / "t.csv").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777

    def fails(f):
        f.write(b"half")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        atomic_write(out / "sub" / "t.csv", fails, root=out)
    assert (out / "sub" / "t.csv").read_text() == "a,b\n"  # the old file, untouched
    assert os.listdir(out / "sub") == ["t.csv"]  # and no temporary file left


def test_refuse_links_under_names_the_link_and_skips_our_own(tmp_path, outside):
    out = tmp_path / "out"
    (out / "native" / "helm" / "model").mkdir(parents=True)
    (out / "native" / "helm" / "model" / "weights.gguf").symlink_to(outside / "precious.txt")
    refuse_links_under(out, own=("native/helm/model",))  # HELM's folder of links to the cached weights
    with pytest.raises(UserError, match=r"weights.gguf is a symbolic link"):
        refuse_links_under(out)
