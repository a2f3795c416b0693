"""The failure catalogue of issue 54, items 4-5: refusals before any folder is made (a Ray address where no
cluster listens, a cache disk that fills while a model's weights are written into it), no lock file or
half-made --out left by a refusal that comes under the lock, the nearest valid name for a mistyped one,
and `analyze` on a sweep that has not finished. Each refusal: exit 2, one line on stderr, no traceback,
nothing created. Quick: no model runs (the weights' conversion is replaced where it writes), no Ray
cluster starts (its address is a closed port on 127.0.0.1)."""

from __future__ import annotations

import errno
import hashlib
import json
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest
from refusals import refused

sys.path.insert(0, str(Path(__file__).parent))

from test_failure_catalogue import finished  # noqa: E402, F401  (a finished sweep folder, made without a model)

from safetyrepro.adapters.catalogue.model_specs import parse_model_spec  # noqa: E402
from safetyrepro.cli import build_parser, main  # noqa: E402
from safetyrepro.errors import UserError  # noqa: E402
from safetyrepro.sweep.options import SweepOptions  # noqa: E402
from safetyrepro.sweep.store import Store, _same_file  # noqa: E402

SWEEP = ["--benchmarks", "xstest", "--tier", "conservative_core", "--limit", "2", "--no-progress"]


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (links included) with its content's sha256."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = "link" if p.is_symlink() else "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch, data_dir) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(folder))
    monkeypatch.setenv("SAFETYREPRO_DATA_DIR", str(data_dir))  # main() may set it: restored after
    return folder


def _never(*args, **kwargs):
    raise AssertionError("ray.init was reached")


# -- 1. Ray: refused before --out is made ----------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_ray_address_where_nothing_listens_is_refused_before_out_is_made(
    scheme, cache, tmp_path, capsys, monkeypatch
):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "init", _never)  # it would retry for minutes: the refusal comes before it
    port = _closed_port()
    out = tmp_path / "new" / "run"
    started = time.monotonic()
    argv = ["sweep", "--models", "smollm2", *SWEEP, "--executor", "ray", "--address", f"{scheme}127.0.0.1:{port}"]
    line = refused(
        [*argv, "--out", out],
        capsys,
        f"no Ray cluster answers at --address {scheme}127.0.0.1:{port} (Connection refused)",
        f"ray start --head --port {port}",
        "--executor local",
    )
    assert line.startswith("safetyrepro: error: ")
    assert time.monotonic() - started < 30  # Ray itself retries for minutes
    assert not (tmp_path / "new").exists()


def test_a_ray_refusal_leaves_an_existing_out_as_it_was(cache, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pytest.importorskip("ray"), "init", _never)
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    argv = ["sweep", "--models", "smollm2", *SWEEP, "--executor", "ray", "--address", f"127.0.0.1:{_closed_port()}"]
    refused([*argv, "--out", out], capsys, "no Ray cluster answers")
    assert _tree(out) == {"notes.txt": hashlib.sha256(b"mine\n").hexdigest()}


class _Listener:
    """A server on 127.0.0.1 that answers each connection with `reply` (None: says nothing) and closes."""

    def __init__(self, reply: bytes | None):
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.reply, self.held = reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.reply is None:
                self.held.append(conn)  # silent: kept open, never answered
            else:
                conn.sendall(self.reply)
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.mark.parametrize(
    "reply,expect",
    [
        (b"\x00\x00\x18\x04\x00\x00\x00\x00\x00", None),  # a gRPC server's SETTINGS frame (a real GCS's first bytes)
        (
            b"HTTP/1.1 505 HTTP Version Not Supported\r\n\r\n",
            "something listens at --address 127.0.0.1:{port}, but not",
        ),
        (None, "no Ray cluster answers at --address 127.0.0.1:{port} (no answer within 0.3 s)"),
    ],
    ids=["grpc", "http", "silent"],
)
def test_a_port_that_is_not_a_ray_cluster_is_told_apart(reply, expect, monkeypatch):
    from safetyrepro.sweep import ray_executor

    monkeypatch.setattr(ray_executor, "RAY_CONNECT_TIMEOUT_S", 0.3)
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    server = _Listener(reply)
    try:
        if expect is None:
            ray_executor.check_ray_address(f"127.0.0.1:{server.port}")
        else:
            with pytest.raises(UserError) as refusal:
                ray_executor.check_ray_address(f"127.0.0.1:{server.port}")
            assert expect.format(port=server.port) in str(refusal.value)
    finally:
        server.close()


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1:port", "127.0.0.1:70000"])
def test_a_ray_address_ray_cannot_read_is_refused(address, cache, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pytest.importorskip("ray"), "init", _never)
    argv = ["sweep", "--models", "smollm2", *SWEEP, "--executor", "ray", "--address", address]
    refused([*argv, "--out", tmp_path / "run"], capsys, f"--address {address!r} is not a Ray address", "HOST:PORT")
    assert not (tmp_path / "run").exists()


def test_a_ray_refusal_under_the_lock_leaves_no_folder_and_no_lock(cache, tmp_path, capsys, monkeypatch):
    """ray.init failing (here: `--address auto` and no cluster on the machine, as Ray words it) comes after the
    folder's lock is taken: the refusal takes back the lock file, sweep.json and the folders it made."""
    ray = pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def no_cluster(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    monkeypatch.setattr(ray, "init", no_cluster)
    out = tmp_path / "new" / "deeper" / "run"
    argv = ["sweep", "--models", "smollm2", *SWEEP, "--executor", "ray", "--address", "auto", "--out", out]
    refused(
        argv,
        capsys,
        "cannot start or reach the Ray cluster at --address auto: Could not find any running Ray instance",
        "--executor local",
    )
    assert not (tmp_path / "new").exists()


def test_a_refusal_under_the_lock_keeps_finished_cells(finished, cache, tmp_path, capsys, monkeypatch):  # noqa: F811
    """A resumed folder: its cells, sweep.json and run.json stay as they were; only the lock file the
    refused run found there is there afterwards."""
    ray = pytest.importorskip("ray")
    import shutil

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    for cell in sorted((out / "cells").glob("*/*.json"))[:2]:
        cell.unlink()  # two cells left to compute: the run reaches ray.init
    before = _tree(out)
    monkeypatch.setattr(ray, "init", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("Timed out")))
    argv = ["sweep", "--models", "smollm2", *SWEEP, "--executor", "ray", "--address", "auto", "--out", out]
    refused(argv, capsys, "cannot start or reach the Ray cluster at --address auto: Timed out;")
    assert _tree(out) == before


# -- 2. a full cache disk while a model's weights are written into it ---------------------------------------
def _cache_fills(monkeypatch, where: str) -> None:
    """The GGUF -> HF folder conversion (adapters/catalogue/loading.py) skipped, and its write into the cache
    failing as a full disk does: through the loader's own words (`save`, it keeps the OSError as context),
    or as the bare OSError (`load`: a write that nothing words)."""
    from safetyrepro.adapters.catalogue import loading

    def full(path) -> OSError:
        return OSError(errno.ENOSPC, "No space left on device", str(path))

    def save(model, tokenizer, resolved, precision, folder):
        raise full(Path(folder) / "model.safetensors")

    def load(resolved, precision="bf16", device="cpu"):
        raise full(loading.cache_dir() / "hf" / "x" / "model.safetensors")

    monkeypatch.setattr(loading, "_load_gguf", lambda resolved, precision: (object(), object()))
    if where == "save":
        monkeypatch.setattr(loading, "_save", save)
    else:
        monkeypatch.setattr(loading, "load_hf", load)
        from safetyrepro.adapters.engine import engine

        monkeypatch.setattr(engine, "load_hf", load)


@pytest.mark.parametrize("where", ["save", "load"])
def test_a_full_cache_disk_is_one_line_naming_the_cache_and_the_fix(where, cache, tmp_path, capsys, monkeypatch):
    _cache_fills(monkeypatch, where)
    out = tmp_path / "new" / "run"
    capsys.readouterr()
    code = main([str(a) for a in ["sweep", "--models", "smollm2", *SWEEP, "--out", out]])
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("safetyrepro: error:")]
    assert code == 2 and len(errors) == 1 and err.splitlines()[-1] == errors[0], err
    # the loader's note that it writes the folder (before the minutes a conversion takes) is the only other line
    assert all(x.startswith("safetyrepro: writing a plain") for x in err.splitlines()[:-1]), err
    assert "Traceback" not in err and "internal error" not in err
    assert errors[0].startswith(
        f"safetyrepro: error: model 'smollm2' cannot load: no space left on the disk of the cache folder {cache} "
        f"(writing {cache}/models/hf/"
    ), errors[0]
    assert errors[0].endswith(
        "free space there, or set SAFETYREPRO_CACHE_DIR to a folder on a disk with room, and rerun the same "
        "command (finished cells are kept)"
    ), errors[0]
    assert not (tmp_path / "new").exists()  # no --out, no lock
    assert not list((cache / "models").rglob("*.tmp"))  # nor a half-written folder in the cache


def test_a_full_disk_elsewhere_names_that_folder(cache, tmp_path):
    from safetyrepro.sweep.cell import disk_full, disk_full_error

    hub = tmp_path / "hf-home" / "hub" / "models--org--x"
    e = disk_full_error("org/x", OSError(errno.ENOSPC, "No space left on device", str(hub / "model.safetensors")))
    assert str(e) == (
        f"model 'org/x' cannot load: no space left on the disk of {hub} (writing {hub / 'model.safetensors'}); "
        "free space there, and rerun the same command (finished cells are kept)"
    )
    try:  # a loader's own error raised while handling the OSError keeps it as its context
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError:
            raise UserError("cannot write the cached HF folder") from None
    except UserError as wrapped:
        assert disk_full(wrapped) is not None and disk_full(wrapped).errno == errno.EDQUOT
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None


def test_a_ray_worker_hands_a_full_disk_back_to_stop_the_run(cache, monkeypatch):
    """On Ray the model loads in a worker: its full disk comes back with the cell's record and stops the run."""
    from safetyrepro.sweep import cell, ray_executor
    from safetyrepro.sweep.plan import Cell
    from safetyrepro.tasks.envelope import Config

    def full(*args, **kwargs):
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(cache / "models" / "x"))
        except OSError:
            raise ValueError("the loader's own words") from None

    monkeypatch.setattr(cell, "open_model", full)
    worker = ray_executor.CellWorker(parse_model_spec("smollm2"), None, (), 1)
    record = worker.run(Cell("smollm2", Config.from_id("xstest/T1/greedy/0shot/free_form"), (0,)))
    assert record["status"] == "failed" and record["stop"].startswith("model 'smollm2' cannot load: no space left")
    with pytest.raises(UserError, match=f"no space left on the disk of the cache folder {cache} "):
        ray_executor.stop_if_refused(record)
    ray_executor.stop_if_refused({"status": "failed", "error": "x"})  # any other failure is the cell's

    monkeypatch.setattr(cell, "open_model", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad header")))
    worker = ray_executor.CellWorker(parse_model_spec("smollm2"), None, (), 1)
    assert worker.stop is None and worker.load_failure == "builtins.ValueError: bad header"


def test_a_model_that_fails_otherwise_still_fails_only_its_cells(cache, monkeypatch):
    """Only a full disk stops the run: another load failure is each of the model's cells' failure."""
    from safetyrepro.sweep import cell

    monkeypatch.setattr(cell, "open_model", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad header")))
    runner = cell.CellRunner(object(), None)  # type: ignore[arg-type]
    assert runner.model is None and runner.load_failure == "builtins.ValueError: bad header"


# -- the lock file a refusal takes back ---------------------------------------------------------------------
def test_abandon_takes_back_only_what_the_run_made(tmp_path):
    out = tmp_path / "a" / "b"
    store = Store(out)
    store.lock()
    store.write_identity({"rules_sha256": "x"}, None)
    (out / "logs" / "inspect").mkdir(parents=True)
    store.abandon()
    assert not (tmp_path / "a").exists()

    out.mkdir(parents=True)
    (out / "mine.txt").write_text("x")
    store.lock()
    store.write_identity({"rules_sha256": "x"}, None)
    store.commit("m", "c", {"key": "m|c", "status": "failed", "error": "e"})
    store.abandon()  # a cell is work: it stays, with the settings it was made under; the lock file goes
    assert sorted(p.name for p in out.iterdir()) == ["cells", "mine.txt", "sweep.json"]
    store.lock()  # and the folder can be locked again
    store.unlock()


def test_a_lock_file_removed_after_it_was_opened_is_not_held(tmp_path):
    """abandon removes the lock file while holding it: a process that opened it before then holds a file no
    longer at the path, which lock() sees and opens the path again (so two runs never both 'hold' it)."""
    (tmp_path / ".lock").write_text("")
    with open(tmp_path / ".lock") as old:
        assert _same_file(old, tmp_path / ".lock")
        (tmp_path / ".lock").unlink()
        assert not _same_file(old, tmp_path / ".lock")
        (tmp_path / ".lock").write_text("")
        assert not _same_file(old, tmp_path / ".lock")


# -- 3. the nearest valid name ---------------------------------------------------------------------------
RUN = ["--models", "smollm2", *SWEEP]
SUGGESTIONS = [
    (["swep"], "invalid choice: 'swep'", "(did you mean 'sweep'?)"),
    (["sweep", *RUN, "--benchmrks", "xstest"], "unrecognized arguments: --benchmrks xstest", "'--benchmarks'"),
    (["sweep", *RUN, "--tempaltes=T1"], "unrecognized arguments: --tempaltes=T1", "'--templates'"),
    (["sweep", *RUN, "-benchmarks", "xstest"], "unrecognized arguments: -benchmarks", "(did you mean '--benchmarks'?)"),
    (["sweep", *RUN, "--data-dri", "d"], "--data-dri d", "(did you mean '--data-dir', before the subcommand?)"),
    (["sweep", *RUN, "--data-dir", "d"], "--data-dir d", "(--data-dir goes before the subcommand: safetyrepro --data"),
    (["sweep", "--models", "smolm2", *SWEEP], "unknown model 'smolm2'", "(did you mean 'smollm2'?)"),
    (["sweep", "--models", "gemma-270m", *SWEEP], "unknown model 'gemma-270m'", "(did you mean 'gemma3-270m'?)"),
    (["sweep", *RUN, "--benchmarks", "xstst"], "unknown benchmark 'xstst'", "(did you mean 'xstest'?)"),
    (["sweep", *RUN, "--benchmarks", "XSTest"], "unknown benchmark 'XSTest'", "(did you mean 'xstest'?)"),
    (["sweep", *RUN, "--tier", "cor"], "unknown tier 'cor'", "(did you mean 'core'?)"),
    (["sweep", *RUN, "--templates", "t2"], "unknown template 't2'", "(did you mean 'T2'?)"),
    (["sweep", *RUN, "--decodings", "gredy"], "unknown decoding 'gredy'", "(did you mean 'greedy'?)"),
    (["sweep", *RUN, "--scoring", "logprobs"], "unknown scoring 'logprobs'", "(did you mean 'logprob'?)"),
    (["sweep", *RUN, "--precision", "bf61"], "unknown precision 'bf61'", "(did you mean 'bf16'?)"),
    (["sweep", *RUN, "--package", "lmeval"], "argument --package: invalid choice: 'lmeval'", "'lm-eval'"),
    (["sweep", *RUN, "--executor", "rey"], "argument --executor: invalid choice: 'rey'", "(did you mean 'ray'?)"),
    (
        ["sweep", *RUN, "--configs", "xstest/T1/gredy/0shot/free_form"],
        "configuration 'xstest/T1/gredy/0shot/free_form' is not among",
        "(did you mean 'xstest/T1/greedy/0shot/free_form'?)",
    ),
    (["items", "--benchmark", "truthfullqa"], "unknown benchmark 'truthfullqa'", "(did you mean 'truthfulqa'?)"),
    (["models", "lst"], "invalid choice: 'lst'", "(did you mean 'list'?)"),
    (["import", "inspct", "x", "--out", "y"], "invalid choice: 'inspct'", "(did you mean 'inspect'?)"),
]


@pytest.mark.parametrize("argv,what,hint", SUGGESTIONS, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in SUGGESTIONS])
def test_a_mistyped_name_gets_the_nearest_valid_one(argv, what, hint, cache, tmp_path, capsys):
    out = tmp_path / "never"
    argv = [*argv, "--out", str(out)] if argv[0] == "sweep" else argv
    with pytest.raises(SystemExit) as stop:  # argparse's refusals exit from inside main
        raise SystemExit(main(argv))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert what in err and hint in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv,what",
    [
        (["sweep", *RUN, "--benchmarks", "mmlu"], "unknown benchmark 'mmlu'; allowed:"),
        (["sweep", "--models", "gpt-17", *SWEEP], "unknown model 'gpt-17'; use an embedded name"),
        (["sweep", *RUN, "--templates", "T5"], "unknown template 'T5'; allowed:"),
        (["sweep", *RUN, "--zzz"], "unrecognized arguments: --zzz"),
        (["analyze", "g", "--benchmarks", "xstest"], "unrecognized arguments: --benchmarks xstest"),  # not analyze's
    ],
)
def test_a_name_near_none_gets_no_guess(argv, what, cache, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        raise SystemExit(main([*argv, "--out", str(tmp_path / "never")]))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and what in err and "did you mean" not in err, err


# -- 4. analyze on a sweep that has not finished ----------------------------------------------------------
def _unfinished(finished: Path, tmp_path: Path) -> Path:  # noqa: F811
    import shutil

    out = tmp_path / "sweep run"
    shutil.copytree(finished, out)
    for name in ("grid.csv", "grid.parquet", "items.parquet", "grid_set.json", "run.json"):
        (out / name).unlink(missing_ok=True)
    for cell in sorted((out / "cells").glob("*/*.json"))[1:]:
        cell.unlink()
    return out


@pytest.mark.parametrize("given", ["grid.csv", "grid.parquet", ""])
def test_analyze_on_an_unfinished_sweep_says_how_to_finish_it(given, finished, cache, tmp_path, capsys):  # noqa: F811
    out = _unfinished(finished, tmp_path)
    command = (
        "safetyrepro sweep --models smollm2 --benchmarks xstest --tier conservative_core --limit 2 "
        f"--out {shlex.quote(str(out))}"
    )
    line = refused(["analyze", out / given if given else out, "--out", tmp_path / "a"], capsys)
    assert line == (
        f"safetyrepro: error: {out} holds a sweep that has not finished (1 cell file written), so there is no "
        f"grid.csv to read yet; to finish it, rerun its command, which resumes from the finished cells: {command} "
        f"({out / 'sweep.json'} records its settings)"
    )
    assert "does not exist" not in line and not (tmp_path / "a").exists()
    # the command given is the sweep's own: parsed, it has the identity sweep.json records
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert SweepOptions.from_args(args).spec().identity() == json.loads((out / "sweep.json").read_text())


def test_analyze_on_a_sweep_with_no_cell_yet(finished, cache, tmp_path, capsys):  # noqa: F811
    out = _unfinished(finished, tmp_path)
    for cell in (out / "cells").glob("*/*.json"):
        cell.unlink()
    refused(["analyze", out / "grid.csv", "--out", tmp_path / "a"], capsys, "has not finished (no cell finished yet)")


def test_analyze_of_a_missing_grid_elsewhere_still_says_it_does_not_exist(cache, tmp_path, capsys):
    refused(["analyze", tmp_path / "grid.csv", "--out", tmp_path / "a"], capsys, "does not exist")


def test_models_labelled_by_a_file_get_the_sweeps_own_command():
    from safetyrepro.analysis.cli import sweep_command

    labelled = {"models": ["small"], "model_specs": ["lm-eval:hf:pretrained=/m"], "benchmarks": ["bbq"]}
    assert sweep_command(labelled, Path("/o")) is None
    assert sweep_command(None, Path("/o")) is None
    assert sweep_command({"models": ["a"]}, Path("/o")) is None  # damaged: no benchmarks
    filtered = {
        "models": ["a", "b c"],
        "benchmarks": ["bbq"],
        "package": "inspect",
        "filters": {"template": ["T1"], "shots": [0, 3]},
        "subsample": 0.5,
        "subset_seed": 7,
    }
    assert sweep_command(filtered, Path("/o")) == (
        "safetyrepro sweep --models a 'b c' --benchmarks bbq --package inspect --subsample 0.5 --subset-seed 7 "
        "--templates T1 --shots 0 3 --out /o"
    )


def test_the_filter_flags_analyze_names_are_the_sweeps():
    from safetyrepro.analysis.cli import _FILTER_FLAGS
    from safetyrepro.sweep.options import AXIS_FLAGS, flag

    assert _FILTER_FLAGS == {axis: flag(dest) for dest, axis in AXIS_FLAGS.items()}
