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


# -- staged_output: a command's whole folder, whole or untouched ------------------------------------
def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(p.stdout)


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def _write_set(out: Path, files: dict[str, str], command: str = "test") -> None:
    from safetyrepro.atomic import staged_output

    with staged_output(out, command) as stage:
        for name, text in files.items():
            atomic_write(stage / name, text, root=stage)


def test_a_staged_set_replaces_the_earlier_one_whole_with_its_marker(tmp_path):
    from safetyrepro.atomic import MARKER, read_marker

    out = tmp_path / "out"
    _write_set(out, {"a.csv": "1", "sub/b.csv": "2"})
    assert read_marker(out)["files"] == ["a.csv", "sub/b.csv"] and read_marker(out)["command"] == "test"
    _write_set(out, {"c.csv": "3"})  # a.csv and sub/ of the earlier run do not survive
    assert set(_tree(out)) == {"c.csv", MARKER}
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_an_error_inside_leaves_the_folder_as_it_was_and_no_staging(tmp_path):
    from safetyrepro.atomic import staged_output

    out = tmp_path / "out"
    _write_set(out, {"a.csv": "1"})
    before = _tree(out)
    with pytest.raises(RuntimeError), staged_output(out, "test") as stage:
        atomic_write(stage / "a.csv", "changed", root=stage)
        raise RuntimeError("boom")
    assert _tree(out) == before and sorted(os.listdir(tmp_path)) == ["out"]


def test_foreign_files_and_other_commands_are_refused_a_link_first(tmp_path, outside):
    from safetyrepro.atomic import check_output_set

    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    with pytest.raises(UserError, match=r"holds mine.txt, which no earlier `safetyrepro test` wrote"):
        _write_set(out, {"a.csv": "1"})
    assert _tree(out) == {"mine.txt": "mine"}
    (out / "link").symlink_to(outside / "precious.txt")
    with pytest.raises(UserError, match=r"link is a symbolic link"):
        check_output_set(out, "test")
    other = tmp_path / "other"
    _write_set(other, {"a.csv": "1"}, command="analyze")
    with pytest.raises(UserError, match=r"holds the output of `safetyrepro analyze`"):
        _write_set(other, {"a.csv": "1"}, command="import")


def test_a_rerun_removes_a_dead_runs_staging_and_puts_its_aside_folder_back(tmp_path):
    out = tmp_path / "out"
    _write_set(out, {"a.csv": "old"})
    dead, alive = _dead_pid(), os.getppid()
    (tmp_path / f".out.safetyrepro-staging-{dead}-0123abcd").mkdir()
    (tmp_path / f".out.safetyrepro-staging-{alive}-0123abcd").mkdir()  # another run still at work: left alone
    (tmp_path / f".unrelated.safetyrepro-staging-{dead}-0123abcd").mkdir()  # another folder's: not ours
    os.rename(out, tmp_path / f".out.safetyrepro-aside-{dead}-89abcdef")  # killed between the two renames
    from safetyrepro.atomic import recover_output

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        recover_output(fd, "out", parent=tmp_path)
    finally:
        os.close(fd)
    assert _tree(out)["a.csv"] == "old"
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["out", f".out.safetyrepro-staging-{alive}-0123abcd", f".unrelated.safetyrepro-staging-{dead}-0123abcd"]
    )
    _write_set(out, {"a.csv": "new"})
    assert _tree(out)["a.csv"] == "new"


def test_a_named_link_keeps_pointing_at_the_replaced_folder(tmp_path):
    real, link = tmp_path / "real", tmp_path / "link"
    _write_set(real, {"a.csv": "1"})
    link.symlink_to(real)
    _write_set(link, {"b.csv": "2"})
    assert link.is_symlink() and set(_tree(real)) == {"b.csv", ".safetyrepro-output.json"}


def test_another_output_inside_is_kept_across_the_swap(tmp_path):
    out = tmp_path / "out"
    _write_set(out, {"grid.csv": "g1"}, command="import")
    _write_set(out / "analysis", {"report.md": "r"}, command="analyze")
    _write_set(out, {"grid.csv": "g2"}, command="import")
    assert _tree(out)["grid.csv"] == "g2" and _tree(out / "analysis")["report.md"] == "r"


def test_a_full_disk_is_one_line_naming_the_file_under_the_folder(tmp_path, monkeypatch):
    import errno

    from safetyrepro.atomic import staged_output

    out = tmp_path / "out"
    _write_set(out, {"a.csv": "1"})

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UserError, match=rf"cannot write {out}/b.csv: No space left on device; {out} is left as it was"):
        with staged_output(out, "test") as stage:
            monkeypatch.setattr(os, "fsync", full)
            atomic_write(stage / "b.csv", "2", root=stage)
    monkeypatch.undo()
    assert _tree(out)["a.csv"] == "1" and sorted(os.listdir(tmp_path)) == ["out"]
