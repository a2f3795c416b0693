"""The failure catalogue of issue 43, parts 1-3: certify's output folder is one set, the sweep's output set
is one set, and replayed (or planned, or resumed) records are the grid's own before any is used. Each
refusal is one line on stderr with exit code 2, checked by its message; after a kill -9 at any write
certify's folder holds the earlier run or the new one and every reader refuses a mixed sweep set. No
model is loaded: replay needs none, and the sweep set is written by the store itself."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "certify"))
sys.path.insert(0, str(Path(__file__).parent / "analysis"))
sys.path.insert(0, str(Path(__file__).parent))

from certify_grids import synthetic_run  # noqa: E402
from test_failure_catalogue import finished  # noqa: E402, F401  (the module's sweep folder fixture)
from test_whole_or_untouched import cli, full_disk_at, kill_points, siblings  # noqa: E402

from safetyrepro.atomic import MARKER  # noqa: E402
from safetyrepro.certify.live import LiveOracle  # noqa: E402
from safetyrepro.cli import main  # noqa: E402
from safetyrepro.errors import UserError  # noqa: E402
from safetyrepro.grid_schema import SET_RECORD, check_set  # noqa: E402
from safetyrepro.sweep.store import Store  # noqa: E402

N = 20  # items per cell: replay decides nothing much on so few, but every check runs


def digest(folder: Path) -> dict[str, str]:
    """Every file but the lock (its text is the holder's pid while a run holds it); cost.json without the
    wall seconds a run measures (every other number of a rerun is the same)."""

    def text(p: Path) -> bytes:
        if p.name != "cost.json":
            return p.read_bytes()
        cost = json.loads(p.read_text())
        return json.dumps({k: v for k, v in cost.items() if k != "seconds_evaluating"}).encode()

    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(text(p)).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def one_line(argv, capsys, *expect: str) -> str:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for e in expect:
        assert e in lines[0], (e, lines[0])
    return lines[0]


def ahead_on_t1(cfg, model):
    return (0.8 if model == "a" else 0.3) if cfg.template == "T1" else (0.3 if model == "a" else 0.8)


def run_files(folder: Path, seed: int = 1, n_items: int = N, precision: str = "fp32"):
    """A replayable run (grid.csv + items.parquet, records carrying their precision and package)."""
    grid, items = synthetic_run(np.random.default_rng(seed), ahead_on_t1, n_items)
    grid["precision"] = precision
    items = items.assign(precision=precision, package="lm-eval")
    folder.mkdir(parents=True, exist_ok=True)
    grid.to_csv(folder / "grid.csv", index=False)
    items.to_parquet(folder / "items.parquet", index=False)
    return grid, items


def replay(items: Path, grid: Path, out: Path, *extra: str) -> list[str]:
    return ["certify", "--replay", items, "--grid", grid, "--out", out, "--quiet", "--seed", "3", *extra]


@pytest.fixture
def run(tmp_path):
    run_files(tmp_path / "run")
    return tmp_path / "run"


# -- 1. certify's output folder ------------------------------------------------------------------------
def test_replay_into_the_folder_of_its_own_inputs_is_refused_and_leaves_them(run, capsys, monkeypatch):
    before = digest(run)
    one_line(replay(run / "items.parquet", run / "grid.csv", run), capsys, f"--out {run} holds a sweep")
    monkeypatch.chdir(run)
    one_line(replay("items.parquet", "grid.csv", "."), capsys, "--out . holds a sweep")
    assert digest(run) == before


def test_replay_with_its_items_file_inside_out_is_refused(run, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(run / "items.parquet", out / "items.parquet")
    one_line(replay(out / "items.parquet", run / "grid.csv", out), capsys, "items.parquet is inside --out")


@pytest.mark.parametrize("name", ["report.md", "claims.csv"])
def test_a_users_own_file_in_out_is_never_replaced(run, tmp_path, capsys, name):
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text("my notes\n")
    one_line(
        replay(run / "items.parquet", run / "grid.csv", out),
        capsys,
        f"holds {name}, which no earlier `safetyrepro certify` wrote",
    )
    assert (out / name).read_text() == "my notes\n" and sorted(os.listdir(out)) == [name]


def test_an_analysis_folder_is_refused(run, tmp_path, capsys):
    out = tmp_path / "analysis"
    out.mkdir()
    (out / "report.md").write_text("# analysis\n")
    (out / MARKER).write_text('{"command": "analyze", "files": ["report.md"]}\n')
    one_line(replay(run / "items.parquet", run / "grid.csv", out), capsys, "holds the output of `safetyrepro analyze`")
    assert (out / "report.md").read_text() == "# analysis\n"


def test_a_sweep_folder_is_refused(finished, run, capsys):  # noqa: F811
    before = digest(finished)
    one_line(replay(run / "items.parquet", run / "grid.csv", finished), capsys, f"--out {finished} holds a sweep")
    assert digest(finished) == before


def test_a_second_replay_replaces_the_whole_set_and_a_locked_folder_is_refused(run, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(a) for a in replay(run / "items.parquet", run / "grid.csv", out)]) == 0
    first = digest(out)
    assert {"certificate.csv", "claims.csv", "cost.json", "report.md", "items.parquet", MARKER} == set(first)
    assert main([str(a) for a in replay(run / "items.parquet", run / "grid.csv", out, "--budget", "100")]) == 0
    second = digest(out)
    assert set(second) == set(first) and second["cost.json"] != first["cost.json"]
    assert pd.read_json(out / "cost.json", typ="series")["paired_evaluations"] <= 100
    held = os.open(out / ".lock", os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        one_line(replay(run / "items.parquet", run / "grid.csv", out), capsys, "is writing to", str(out))
    finally:
        os.close(held)
    assert digest(out) == second


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """A certify folder of one replay (snapshot), the digests after it and after a second replay into
    it, and the count of file renames of that second run."""
    t = tmp_path_factory.mktemp("certified")
    run_files(t / "run")
    out = t / "w" / "out"
    argv = [str(a) for a in replay(t / "run" / "items.parquet", t / "run" / "grid.csv", out)]
    assert cli(*argv).returncode == 0
    old = digest(out)
    shutil.copytree(out, t / "snapshot")
    second = [*argv, "--budget", "200"]
    done = cli(*second)
    assert done.returncode == 0, done.stderr
    new = digest(out)
    assert old != new and MARKER in new
    total = int(done.stderr.rsplit("WOU_CALLS=", 1)[1].split()[0])
    return {"argv": second, "out": out, "snapshot": t / "snapshot", "old": old, "new": new, "total": total}


def test_certify_killed_at_any_write_leaves_the_earlier_run_or_the_new_one(certified):
    out, seen = certified["out"], set()
    for k in kill_points(certified["total"]):
        shutil.rmtree(out)
        shutil.copytree(certified["snapshot"], out)
        killed = cli(*certified["argv"], kill_at=k)
        assert killed.returncode == -9, killed.stderr
        now = digest(out)
        assert now in (certified["old"], certified["new"]), f"kill at call {k} left a mix"
        seen.add("old" if now == certified["old"] else "new")
        assert cli(*certified["argv"]).returncode == 0 and digest(out) == certified["new"]  # a rerun completes
        assert not siblings(out)
    assert seen == {"old", "new"}


@pytest.mark.parametrize("k", [1, 3, 6])  # the first file, one in the middle, the marker
def test_a_full_disk_during_certify_leaves_the_earlier_run(certified, tmp_path, monkeypatch, capsys, k):
    out = tmp_path / "out"
    shutil.copytree(certified["snapshot"], out)
    argv = [a if a != str(certified["out"]) else str(out) for a in certified["argv"]]
    full_disk_at(monkeypatch, k)
    one_line(argv, capsys, f"cannot write {out}/", "No space left on device", "left as it was")
    assert digest(out) == certified["old"] and not siblings(out)


# -- 2. the sweep's output set -------------------------------------------------------------------------
WRITER = r"""
import json, os, sys
K, calls = int(os.environ["WOU_KILL_AT"]), [0]
real = os.replace
def counted(*a, **kw):
    calls[0] += 1
    if calls[0] == K:
        os.kill(os.getpid(), 9)
    return real(*a, **kw)
os.replace = counted
from pathlib import Path
from safetyrepro.sweep.store import Store
store = Store(Path(sys.argv[1]))
records = store.records()
for r in records:  # another state of the same cells: every score moved
    r["row"]["score"], r["row"]["parse_rate"] = 1.0 - r["row"]["score"], 0.5
    for it in r.get("items") or []:
        it["item_score"] = 1.0 - it["item_score"]
store.write_outputs(records, [r["key"] for r in records])
sys.stderr.write(f"WOU_CALLS={calls[0]}\n")
"""


def rewrite(folder: Path, kill_at: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "WOU_KILL_AT": str(kill_at)}
    return subprocess.run([sys.executable, "-c", WRITER, str(folder)], env=env, capture_output=True, text=True)


SET = ("grid.csv", "grid.parquet", "items.parquet")


def test_a_sweep_killed_between_its_outputs_leaves_a_set_every_reader_refuses(finished, tmp_path, capsys):  # noqa: F811
    old = {n: (finished / n).read_bytes() for n in SET}
    assert (finished / SET_RECORD).is_file()
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    done = rewrite(folder)
    assert done.returncode == 0, done.stderr
    new = {n: (folder / n).read_bytes() for n in SET}
    assert all(old[n] != new[n] for n in SET)
    total = int(done.stderr.rsplit("WOU_CALLS=", 1)[1].split()[0])
    assert total == 4  # the record, then the three members
    readers = [
        ["analyze", "{d}/grid.csv", "--out", "{t}/a"],
        ["analyze", "{d}/grid.parquet", "--out", "{t}/a"],
        ["verdict", "smollm2", "other", "--grid", "{d}/grid.csv"],
        ["export", "eee", "{d}/grid.csv", "--out", "{t}/e"],
        ["plan", "{d}/grid.csv"],
        ["certify", "--replay", "{d}/items.parquet", "--grid", "{d}/grid.csv", "--out", "{t}/c"],
    ]
    mixed = 0
    for k in range(1, total + 1):
        shutil.rmtree(folder)
        shutil.copytree(finished, folder)
        assert rewrite(folder, kill_at=k).returncode == -9
        now = {n: (folder / n).read_bytes() for n in SET}
        if now in (old, new) and k == 1:
            continue  # killed before the record: the earlier set, whole
        mixed += 1
        for argv in readers:
            one_line(
                [a.format(d=folder, t=tmp_path) for a in argv],
                capsys,
                "grid.csv, grid.parquet, items.parquet are not one set",
                f"rerun the sweep's command with --out {folder}",
            )
    assert mixed == total - 1
    assert rewrite(folder).returncode == 0  # what the sweep's rerun does: the set written whole again
    check_set(folder / "grid.csv")
    assert {n: (folder / n).read_bytes() for n in SET} == new
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_a_member_replaced_by_hand_is_refused_and_a_hand_written_grid_is_read(finished, tmp_path, capsys):  # noqa: F811
    folder = tmp_path / "run"
    shutil.copytree(finished, folder)
    grid = pd.read_csv(folder / "grid.csv")
    grid.iloc[::-1].to_csv(folder / "grid.csv", index=False)
    one_line(
        ["analyze", folder / "grid.csv", "--out", tmp_path / "a"],
        capsys,
        "(grid.csv is not the file grid_set.json records",
    )
    (folder / "grid.parquet").unlink()
    (folder / "grid.csv").write_bytes((finished / "grid.csv").read_bytes())
    one_line(["analyze", folder / "grid.csv", "--out", tmp_path / "a"], capsys, "(grid.parquet is missing")
    hand = tmp_path / "hand"
    hand.mkdir()
    _, _ = run_files(hand)
    (hand / "items.parquet").unlink()
    assert (
        main(["analyze", str(hand / "grid.csv"), "--out", str(tmp_path / "h"), "--no-figures", "--bootstrap", "20"])
        == 0
    )


# -- 3. replayed, planned and resumed records -----------------------------------------------------------
def certificate(out: Path) -> list:
    """The verdicts and every claim's bounds: records mixed in move them."""
    # an empty cell (no deciding configuration) reads as NaN, which equals nothing: compare it as ""
    return [pd.read_csv(out / f).fillna("").to_numpy().tolist() for f in ("certificate.csv", "claims.csv")]


def test_precision_picks_the_item_rows_as_it_picks_the_grid(tmp_path, capsys):
    grid, items = run_files(tmp_path / "fp32")
    other_grid, other_items = run_files(tmp_path / "bf16", seed=9, precision="bf16")
    other_items["item_score"] = 1.0 - other_items["item_score"]  # the other precision reverses every lead
    both = tmp_path / "both"
    both.mkdir()
    pd.concat([grid, other_grid]).to_csv(both / "grid.csv", index=False)
    pd.concat([items, other_items]).to_parquet(both / "items.parquet", index=False)
    assert (
        main([str(a) for a in replay(tmp_path / "fp32/items.parquet", tmp_path / "fp32/grid.csv", tmp_path / "o1")])
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [str(a) for a in replay(both / "items.parquet", both / "grid.csv", tmp_path / "o2", "--precision", "fp32")]
        )
        == 0
    )
    assert "records of another precision than the grid's fp32 were left out" in capsys.readouterr().err
    assert certificate(tmp_path / "o2") == certificate(tmp_path / "o1")


def _edited(tmp_path: Path, edit) -> tuple[Path, Path]:
    grid, items = run_files(tmp_path / "run")
    items = edit(items)
    items.to_parquet(tmp_path / "run" / "items.parquet", index=False)
    return tmp_path / "run" / "items.parquet", tmp_path / "run" / "grid.csv"


def _greedy(items: pd.DataFrame) -> pd.Series:
    return items["config_id"].str.contains("/greedy/")


CASES = [
    (
        "conflicting-duplicate",
        lambda f: pd.concat([f, f.iloc[:1].assign(item_score=1.0 - f["item_score"].iloc[0])]),
        "keys have records that disagree (e.g. 'a' on truthfulqa/T1/greedy/0shot/free_form, item "
        "'truthfulqa/0000', seed 0: item_score 0 and 1)",
    ),
    (
        "seed-the-grid-never-ran",
        lambda f: pd.concat([f, f[_greedy(f)].iloc[:1].assign(seed=7)]),
        "records of seeds the grid never ran (e.g. 'a' on truthfulqa/T1/greedy/0shot/free_form: seeds 0, 7, the grid "
        "ran 1 seed)",
    ),
    (
        "a-missing-seed",
        lambda f: f[
            ~((f["config_id"].str.contains("/moderate/")) & (f["seed"] == 4) & (f["item_id"] == "truthfulqa/0003"))
        ],
        "items have fewer seed records than their cell's n_seeds",
    ),
    (
        "fewer-items-than-the-grid",
        lambda f: f[f["item_id"] < "truthfulqa/0012"],
        "cells' records cover another number of items than the grid's n_items (e.g. 'a' on "
        "truthfulqa/T1/diverse/0shot/free_form: 12 items, the grid says 20)",
    ),
    (
        "off-lattice-free-form",
        lambda f: f.assign(item_score=np.where(np.arange(len(f)) == 5, 0.37, f["item_score"])),
        "row 6: item_score 0.37 of 'a' on truthfulqa/T1/greedy/0shot/free_form is off the lattice its scoring gives "
        "(0 or 1 (a free-form answer))",
    ),
    (
        "off-lattice-logprob",
        lambda f: f.assign(
            item_score=np.where(
                f["config_id"].str.endswith("logprob") & (f["item_id"] == "truthfulqa/0002"), 0.3, f["item_score"]
            )
        ),
        "item_score 0.3 of 'a' on truthfulqa/T1/greedy/0shot/logprob is off the lattice its scoring gives "
        "(j/k for k tied",
    ),
]


@pytest.mark.parametrize("edit, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_replay_records_that_are_not_the_grids_are_refused(tmp_path, capsys, edit, message):
    items, grid = _edited(tmp_path, edit)
    one_line(replay(items, grid, tmp_path / "out"), capsys, message)
    assert not (tmp_path / "out").exists()


def test_exact_repeats_are_dropped_and_counted(tmp_path, capsys):
    run_files(tmp_path / "run")
    assert (
        main([str(a) for a in replay(tmp_path / "run/items.parquet", tmp_path / "run/grid.csv", tmp_path / "o1")]) == 0
    )
    items, grid = _edited(tmp_path, lambda f: pd.concat([f, f.iloc[:7]]))
    capsys.readouterr()
    assert main([str(a) for a in replay(items, grid, tmp_path / "o2")]) == 0
    assert "items: 7 exact repeats of a record were dropped" in capsys.readouterr().err
    assert certificate(tmp_path / "o2") == certificate(tmp_path / "o1")


def test_plan_refuses_the_same_records(tmp_path, capsys):
    items, grid = _edited(tmp_path, CASES[1][1])
    one_line(["plan", grid], capsys, "records of seeds the grid never ran")
    items, grid = _edited(tmp_path, CASES[3][1])
    one_line(["plan", grid], capsys, "12 items, the grid says 20")


def test_resume_refuses_edited_own_records():
    """Live certify takes its own items.parquet back at resume through keep_earlier: an edited score, or
    two records of one key that disagree, is refused there, before anything is evaluated."""
    from types import SimpleNamespace

    from safetyrepro.sweep.plan import Cell

    cfg = SimpleNamespace(config_id="x/T1/greedy/0shot/free_form", benchmark="x", scoring="free_form", precision="fp32")
    spec = SimpleNamespace(models=("a", "b"), package="lm-eval")
    oracle = LiveOracle(SimpleNamespace(cells=[Cell(m, cfg, (0,)) for m in ("a", "b")], spec=spec))
    rows = [{"model": "a", "config_id": cfg.config_id, "item_id": "i0", "seed": 0, "item_score": 0.37}]
    with pytest.raises(UserError, match="item_score 0.37 of 'a' on x/T1/greedy/0shot/free_form is off the lattice"):
        oracle.keep_earlier(pd.DataFrame(rows), source="out/items.parquet")
    rows = [{**rows[0], "item_score": 1.0}, {**rows[0], "item_score": 0.0}]
    with pytest.raises(UserError, match="records that disagree"):
        oracle.keep_earlier(pd.DataFrame(rows), source="out/items.parquet")
    assert oracle.keep_earlier(pd.DataFrame(rows[:1] * 2)) == 1


def test_the_lock_stays_held_through_the_swap(run, tmp_path):
    """A live run holds DIR/.lock for hours while each checkpoint swaps the folder: the lock file is moved
    into the new set, so the same file (inode) is still locked, and a second run is still refused."""
    from safetyrepro.atomic import atomic_write, staged_output
    from safetyrepro.certify.outputs import COMMAND, carried, legacy_certify

    out = tmp_path / "out"
    assert main([str(a) for a in replay(run / "items.parquet", run / "grid.csv", out)]) == 0
    (out / "logs").mkdir()
    (out / "logs" / "a.eval").write_text("inspect's log")
    store = Store(out)
    store.lock()
    try:
        inode = os.stat(out / ".lock").st_ino
        with staged_output(out, COMMAND, legacy=legacy_certify, carry=carried) as stage:
            atomic_write(stage / "report.md", "# again\n", root=stage)
        assert os.stat(out / ".lock").st_ino == inode and (out / "logs" / "a.eval").read_text() == "inspect's log"
        with pytest.raises(UserError, match="is writing to"):
            Store(out).lock()
    finally:
        store.unlock()
    assert sorted(os.listdir(out)) == [".lock", MARKER, "logs", "report.md"]


def test_resume_reads_only_a_whole_set(run, tmp_path):
    """A live run resumes from cost.json and items.parquet only when the folder's marker names both (one
    set, written together), or from a certify folder of before markers."""
    from safetyrepro.certify.outputs import whole_set

    out = tmp_path / "out"
    assert main([str(a) for a in replay(run / "items.parquet", run / "grid.csv", out)]) == 0
    assert whole_set(out)
    (out / MARKER).write_text(json.dumps({"command": "certify", "files": ["cost.json", "report.md"]}))
    assert not whole_set(out)
    (out / MARKER).unlink()
    assert whole_set(out)  # cost.json is certify's: a folder from before markers
    (out / "cost.json").write_text("{}")
    assert not whole_set(out)


def test_a_damaged_cost_json_is_refused_not_replaced(run, tmp_path, capsys):
    """Starting afresh over a set whose cost.json is damaged would replace its items.parquet, records a rerun
    needs: live certify refuses in one line before any model loads, and the folder is left as it was."""
    out = tmp_path / "out"
    assert main([str(a) for a in replay(run / "items.parquet", run / "grid.csv", out)]) == 0
    (out / "cost.json").write_text("{not json")
    before = (out / "items.parquet").read_bytes()
    one_line(
        ["certify", "--models", "smollm2", "gemma3-270m", "--configs", "xstest/T1/greedy/0shot/logprob"]
        + ["--limit", "2", "--out", out],
        capsys,
        "its cost.json is damaged",
    )
    assert (out / "items.parquet").read_bytes() == before and (out / "cost.json").read_text() == "{not json"
