"""Whole or untouched: a command that writes a set of files (analyze, compare, import, models export)
leaves its folder as it was or complete for the new run, whatever kills it (kill -9 at any file
write or at the swap, a full disk), never replaces a file it did not write, and a rerun completes
it. And `make test` leaves no build/ folder in the checkout."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "analysis"))
sys.path.insert(0, str(Path(__file__).parent / "importers"))

from analysis_grids import CC, grid_frame, write  # noqa: E402
from lm_eval_fixtures import write_run  # noqa: E402

from safetyrepro.atomic import MARKER  # noqa: E402
from safetyrepro.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REAL_FSYNC = os.fsync
SIXTHS = {k: [1.0] * k + [0.0] * (6 - k) for k in range(7)}

# Runs the CLI with os.replace / os.rename and the helper's swap and removal counted; the K-th call
# kills the process (SIGKILL, as kill -9) before it happens. K=0 counts only: the total goes to stderr.
KILLER = r"""
import os, sys
K, calls = int(os.environ["WOU_KILL_AT"]), [0]
def hook(fn):
    def counted(*a, **kw):
        calls[0] += 1
        if calls[0] == K:
            os.kill(os.getpid(), 9)
        return fn(*a, **kw)
    return counted
os.replace, os.rename = hook(os.replace), hook(os.rename)
import safetyrepro.atomic as at
at._exchange, at._rmtree = hook(at._exchange), hook(at._rmtree)
if os.environ.get("WOU_NO_EXCHANGE"):
    at._exchange = hook(lambda *a: False)
from safetyrepro.cli import main
code = main(sys.argv[1:])
sys.stderr.write(f"WOU_CALLS={calls[0]}\n")
sys.exit(code)
"""


def digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if ".safetyrepro-" in p.name)


def cli(*argv: str, kill_at: int = 0, no_exchange: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "WOU_KILL_AT": str(kill_at)}
    env.pop("WOU_NO_EXCHANGE", None)
    if no_exchange:
        env["WOU_NO_EXCHANGE"] = "1"
    return subprocess.run([sys.executable, "-c", KILLER, *argv], env=env, capture_output=True, text=True, timeout=300)


def calls(run: subprocess.CompletedProcess) -> int:
    assert run.returncode == 0, run.stderr
    return int(run.stderr.rsplit("WOU_CALLS=", 1)[1].split()[0])


def restore(snapshot: Path, folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(snapshot, folder, symlinks=True)


def kill_points(total: int) -> list[int]:
    """Early and middle file writes, and every step of the end: the marker, the swap, the removal."""
    return sorted({1, total // 2, *range(max(1, total - 3), total + 1)})


# -- reference runs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    """Two grids; the folder `a` holding the analysis of the first (snapshot), and the digests of the
    folder after analysing the first and after analysing the second into it."""
    t = tmp_path_factory.mktemp("wou_analyze")
    old = write(
        grid_frame({"a": dict(zip(CC, [0.5, 0.6, 0.4, 0.7])), "b": dict(zip(CC, [0.6, 0.5, 0.5, 0.6]))}), t / "old.csv"
    )
    new = write(
        grid_frame({"a": dict(zip(CC, [0.2, 0.6, 0.4, 0.7])), "b": dict(zip(CC, [0.6, 0.5, 0.9, 0.6]))}), t / "new.csv"
    )
    out = t / "w" / "a"
    args = ("--no-figures", "--bootstrap", "20")
    assert cli("analyze", str(old), "--out", str(out), *args).returncode == 0
    r_old = digest(out)
    shutil.copytree(out, t / "snapshot")
    total = calls(cli("analyze", str(new), "--out", str(out), *args))
    r_new = digest(out)
    assert r_old != r_new and MARKER in r_old and MARKER in r_new
    return {
        "old": old,
        "new": new,
        "out": out,
        "snapshot": t / "snapshot",
        "r_old": r_old,
        "r_new": r_new,
        "total": total,
        "args": args,
    }


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """Two sets of lm-eval runs and the import folder of the first (snapshot), as for analyses."""
    t = tmp_path_factory.mktemp("wou_import")
    other = dict(
        model_kind="hf",
        model="/models/other",
        weights=None,
        model_args={"pretrained": "/models/other", "dtype": "bfloat16"},
    )
    for k, (shots, chat) in enumerate([(0, True), (3, True), (0, False), (3, False)]):
        write_run(t / "runs_old", scores=SIXTHS[[4, 3, 2, 5][k]], shots=shots, chat=chat, i=k, folder=f"smol/{k}")
        write_run(t / "runs_new", scores=SIXTHS[[1, 6, 2, 3][k]], shots=shots, chat=chat, i=k, folder=f"smol/{k}")
        for runs in ("runs_old", "runs_new"):
            write_run(
                t / runs, scores=SIXTHS[[3, 4, 2, 1][k]], shots=shots, chat=chat, i=4 + k, folder=f"other/{k}", **other
            )
    out = t / "w" / "imported"
    assert cli("import", "lm-eval", str(t / "runs_old"), "--out", str(out)).returncode == 0
    r_old = digest(out)
    shutil.copytree(out, t / "snapshot")
    total = calls(cli("import", "lm-eval", str(t / "runs_new"), "--out", str(out)))
    r_new = digest(out)
    assert r_old != r_new and {"grid.csv", "run.json", "items.parquet", MARKER} <= set(r_new)
    return {
        "old": t / "runs_old",
        "new": t / "runs_new",
        "out": out,
        "snapshot": t / "snapshot",
        "r_old": r_old,
        "r_new": r_new,
        "total": total,
    }


# -- (a) the user's own files -------------------------------------------------------------------------
def test_import_refuses_a_folder_of_the_users_own_files_and_leaves_them(imports, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "run.json").write_text('{"my": "experiment"}\n')
    (mine / "rules.yaml").write_text("mine: true\n")
    (mine / "provenance.csv").write_text("path,sha256\nx,y\n")
    before = digest(mine)
    assert main(["import", "lm-eval", str(imports["new"]), "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("safetyrepro: error: --out") and "no earlier `safetyrepro import`" in err[0]
    )
    assert digest(mine) == before and not siblings(mine)


def test_an_earlier_output_with_a_file_added_by_hand_is_refused(analyses, tmp_path, capsys):
    out = tmp_path / "a"
    restore(analyses["snapshot"], out)
    (out / "my_notes.md").write_text("mine\n")
    before = digest(out)
    assert main(["analyze", str(analyses["new"]), "--out", str(out), *analyses["args"]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "my_notes.md" in err[0] and MARKER in err[0]
    assert digest(out) == before


def test_another_commands_output_is_refused_and_an_empty_folder_is_fine(analyses, imports, tmp_path, capsys):
    assert main(["analyze", str(analyses["new"]), "--out", str(imports["snapshot"]), *analyses["args"]]) == 2
    assert "holds the output of `safetyrepro import`" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["analyze", str(analyses["new"]), "--out", str(tmp_path / "empty"), *analyses["args"]]) == 0
    assert digest(tmp_path / "empty") == analyses["r_new"]


def test_an_analysis_inside_the_import_folder_is_kept(imports, analyses, tmp_path):
    out = tmp_path / "imported"
    restore(imports["snapshot"], out)
    assert main(["analyze", str(out / "grid.csv"), "--out", str(out / "analysis"), *analyses["args"]]) == 0
    kept = digest(out / "analysis")
    assert main(["import", "lm-eval", str(imports["new"]), "--out", str(out)]) == 0
    assert digest(out / "analysis") == kept
    assert {k: v for k, v in digest(out).items() if not k.startswith("analysis/")} == imports["r_new"]


def test_an_input_inside_the_output_folder_is_refused(analyses, tmp_path, capsys):
    out = tmp_path / "a"
    restore(analyses["snapshot"], out)
    shutil.copy(analyses["new"], out / "grid.csv")  # as api.analyze(...).report(out) leaves its grid there
    marker = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({**marker, "files": [*marker["files"], "grid.csv"]}))
    before = digest(out)
    assert main(["analyze", str(out / "grid.csv"), "--out", str(out), *analyses["args"]]) == 2
    assert "inside --out" in capsys.readouterr().err and digest(out) == before


# -- (b), (c) kill -9 ---------------------------------------------------------------------------------
def test_analyze_killed_at_any_write_leaves_the_earlier_analysis_or_the_new_one(analyses, tmp_path):
    out = tmp_path / "w" / "a"
    seen = set()
    for k in kill_points(analyses["total"]):
        restore(analyses["snapshot"], out)
        run = cli("analyze", str(analyses["new"]), "--out", str(out), *analyses["args"], kill_at=k)
        assert run.returncode == -9, (k, run.stderr)
        now = digest(out)
        assert now in (analyses["r_old"], analyses["r_new"]), f"kill at call {k} left a mix"
        seen.add("old" if now == analyses["r_old"] else "new")
        rerun = cli("analyze", str(analyses["new"]), "--out", str(out), *analyses["args"])
        assert rerun.returncode == 0, rerun.stderr
        assert digest(out) == analyses["r_new"] and not siblings(out), k
    assert seen == {"old", "new"}  # the kill points cover both sides of the swap


def test_import_killed_at_any_write_leaves_the_earlier_import_or_the_new_one(imports, tmp_path):
    out = tmp_path / "w" / "imported"
    for k in kill_points(imports["total"]):
        restore(imports["snapshot"], out)
        run = cli("import", "lm-eval", str(imports["new"]), "--out", str(out), kill_at=k)
        assert run.returncode == -9, (k, run.stderr)
        assert digest(out) in (imports["r_old"], imports["r_new"]), f"kill at call {k} left a mix"
        assert cli("import", "lm-eval", str(imports["new"]), "--out", str(out)).returncode == 0
        assert digest(out) == imports["r_new"] and not siblings(out), k


def test_without_an_atomic_exchange_a_kill_between_the_two_renames_is_undone_by_the_rerun(analyses, tmp_path):
    """Where the file system cannot exchange two folders, the swap is two renames; killed between
    them, the earlier folder is whole under its aside name, and the rerun puts it back, then completes."""
    out = tmp_path / "w" / "a"
    restore(analyses["snapshot"], out)
    total = calls(cli("analyze", str(analyses["new"]), "--out", str(out), *analyses["args"], no_exchange=True))
    assert digest(out) == analyses["r_new"]
    # the end: marker, rename onto the folder (refused: not empty), exchange (unavailable), aside, in, removal
    for k in (total - 2, total - 1):
        restore(analyses["snapshot"], out)
        run = cli("analyze", str(analyses["new"]), "--out", str(out), *analyses["args"], kill_at=k, no_exchange=True)
        assert run.returncode == -9, (k, run.stderr)
        if out.exists():
            assert digest(out) in (analyses["r_old"], analyses["r_new"]), k
        else:
            (aside,) = [out.parent / n for n in siblings(out) if ".safetyrepro-aside-" in n]
            assert digest(aside) == analyses["r_old"], k
        assert cli("analyze", str(analyses["new"]), "--out", str(out), *analyses["args"]).returncode == 0
        assert digest(out) == analyses["r_new"] and not siblings(out), k


# -- (d) no stale figures -----------------------------------------------------------------------------
def test_no_figures_into_an_analysis_with_figures_leaves_no_png(analyses, tmp_path):
    out = tmp_path / "a"
    assert main(["analyze", str(analyses["old"]), "--out", str(out), "--bootstrap", "20"]) == 0
    assert list(out.glob("figures/*.png"))
    assert main(["analyze", str(analyses["new"]), "--out", str(out), *analyses["args"]]) == 0
    assert not list(out.rglob("*.png")) and digest(out) == analyses["r_new"]


# -- (e) a full disk ----------------------------------------------------------------------------------
def full_disk_at(monkeypatch, k: int) -> None:
    """The k-th file's fsync fails as a full disk does (folders' fsyncs are not counted)."""
    real, seen = os.fsync, [0]

    def fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            seen[0] += 1
            if seen[0] == k:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("k", [1, 9, 22, 24])  # the first table, one in the middle, the card, the marker
def test_a_full_disk_during_analyze_leaves_the_folder_as_it_was(analyses, tmp_path, monkeypatch, capsys, k):
    out = tmp_path / "a"
    restore(analyses["snapshot"], out)
    full_disk_at(monkeypatch, k)
    assert main(["analyze", str(analyses["new"]), "--out", str(out), *analyses["args"]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"safetyrepro: error: cannot write {out}/") and "No space left on device" in err[0]
    named = err[0].split("cannot write ", 1)[1].split(":", 1)[0]
    assert Path(named).parent == out and Path(named).name in analyses["r_new"]
    assert digest(out) == analyses["r_old"] and not siblings(out)


@pytest.mark.parametrize("k", [1, 4])
def test_a_full_disk_during_import_leaves_the_folder_as_it_was(imports, tmp_path, monkeypatch, capsys, k):
    out = tmp_path / "imported"
    restore(imports["snapshot"], out)
    full_disk_at(monkeypatch, k)
    assert main(["import", "lm-eval", str(imports["new"]), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot write {out}/" in err[0] and "left as it was" in err[0], err
    assert digest(out) == imports["r_old"] and not siblings(out)


# -- compare and models export ------------------------------------------------------------------------
def test_compare_replaces_its_own_output_whole_and_refuses_foreign_files(analyses, tmp_path, capsys):
    out = tmp_path / "c"
    grids = [str(analyses["old"]), str(analyses["new"])]
    assert main(["compare", *grids, "--labels", "x", "y", "--out", str(out)]) == 0
    first = digest(out)
    assert json.loads((out / MARKER).read_text())["command"] == "compare"
    (out / "compare_stale.csv").write_text("left by hand\n")
    assert main(["compare", *grids, "--labels", "x", "y", "--out", str(out)]) == 2
    assert "compare_stale.csv" in capsys.readouterr().err
    (out / "compare_stale.csv").unlink()
    assert main(["compare", *grids, "--labels", "x", "y", "--out", str(out)]) == 0 and digest(out) == first


def test_models_export_is_swapped_in_whole(tmp_path, monkeypatch, capsys):
    from safetyrepro.adapters.catalogue import loading

    cached = tmp_path / "cached"
    cached.mkdir()
    (cached / "model.safetensors").write_bytes(b"w" * 100)
    (cached / loading.SOURCE_FILE).write_text("{}")
    monkeypatch.setattr(loading, "materialised_folder", lambda resolved, precision: cached)

    class Resolved:
        kind = "gguf"

    out = tmp_path / "export"
    loading.export_hf_folder(Resolved(), out, "bf16")
    assert json.loads((out / MARKER).read_text())["command"] == "models export"
    (cached / "model.safetensors").write_bytes(b"v" * 100)
    full_disk_at(monkeypatch, 1)  # the copy is not fsynced file by file: the marker is the first
    with pytest.raises(Exception, match="left as it was"):
        loading.export_hf_folder(Resolved(), out, "bf16", overwrite=True)
    assert (out / "model.safetensors").read_bytes() == b"w" * 100 and not siblings(out)
    monkeypatch.setattr(os, "fsync", REAL_FSYNC)
    loading.export_hf_folder(Resolved(), out, "bf16", overwrite=True)
    assert (out / "model.safetensors").read_bytes() == b"v" * 100 and not siblings(out)
    (out / "mine.txt").write_text("mine")
    with pytest.raises(Exception, match="mine.txt"):
        loading.export_hf_folder(Resolved(), out, "bf16", overwrite=True)


# -- (f) the build folder -----------------------------------------------------------------------------
def test_building_the_package_writes_no_build_folder_into_the_checkout():
    """`pip wheel .` / `pip install .` (the wheel test in tests/tasks does one) build under a temporary
    folder, not REPO/build: a build/lib copy of the tasks made `inspect list tasks` list each twice."""
    code = (
        "import sys; from setuptools.dist import Distribution; import setuptools, distutils.core as c; "
        "d = c.run_setup('setup.py', stop_after='init'); b = d.get_command_obj('build'); b.ensure_finalized(); "
        "w = d.get_command_obj('bdist_wheel'); w.ensure_finalized(); print(b.build_base); print(w.bdist_dir)"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for line in run.stdout.split():
        assert not Path(line).resolve().is_relative_to(REPO), line
