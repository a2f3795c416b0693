"""Pinned sources: mirror, cache and download paths, checksum and missing-file errors."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmarks.xstest import SOURCE as XSTEST
from safetyrepro.tasks.sources import PinnedFile, Source, fetch


@pytest.fixture
def fake_source(tmp_path):
    body = b"id,prompt\n1,hello\n"
    pinned = PinnedFile("sub/f.csv", hashlib.sha256(body).hexdigest(), ())
    return Source("fake", "o/r", "c0ffee", "MIT", (pinned,)), body


def test_mirror_file_is_verified(tmp_path, monkeypatch, fake_source):
    src, body = fake_source
    (tmp_path / "fake" / "sub").mkdir(parents=True)
    (tmp_path / "fake" / "sub" / "f.csv").write_bytes(body)
    monkeypatch.setenv("SAFETYREPRO_DATA_DIR", str(tmp_path))
    assert fetch(src, "sub/f.csv").read_bytes() == body
    (tmp_path / "fake" / "sub" / "f.csv").write_bytes(body + b"2,tampered\n")
    with pytest.raises(
        UserError, match=r"checksum mismatch for fake file .*f\.csv: expected sha256 " + src.files[0].sha256
    ):
        fetch(src, "sub/f.csv")


def test_missing_file_names_file_and_hash(tmp_path, monkeypatch, fake_source):
    src, _ = fake_source
    monkeypatch.setenv("SAFETYREPRO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SAFETYREPRO_OFFLINE", "1")
    with pytest.raises(UserError, match=f"missing fake file sub/f.csv \\(sha256 {src.files[0].sha256}\\)"):
        fetch(src, "sub/f.csv")


def test_download_goes_to_the_cache_and_is_checked(tmp_path, monkeypatch, fake_source):
    src, body = fake_source
    served = tmp_path / "www"
    served.mkdir()
    (served / "good.csv").write_bytes(body)
    (served / "bad.csv").write_bytes(b"not it")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        monkeypatch.delenv("SAFETYREPRO_DATA_DIR", raising=False)
        monkeypatch.delenv("SAFETYREPRO_OFFLINE", raising=False)
        monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path / "cache"))
        pinned = PinnedFile("sub/f.csv", src.files[0].sha256, (f"{base}/bad.csv", f"{base}/good.csv"))
        got = fetch(Source("fake", "o/r", "c", "MIT", (pinned,)), "sub/f.csv")
        assert got == tmp_path / "cache" / "data" / "fake" / "sub" / "f.csv" and got.read_bytes() == body
        only_bad = PinnedFile("sub/g.csv", src.files[0].sha256, (f"{base}/bad.csv",))
        with pytest.raises(UserError, match="bad.csv: sha256 .*expected"):
            fetch(Source("fake", "o/r", "c", "MIT", (only_bad,)), "sub/g.csv")
        assert not (tmp_path / "cache" / "data" / "fake" / "sub" / "g.csv").exists()
    finally:
        server.shutdown()


def test_every_benchmark_file_in_the_mirror_matches_its_pin(data_dir):
    assert fetch(XSTEST, "xstest_prompts.csv").parent == data_dir / "xstest"


def _cli(args, env):
    return subprocess.run(
        [sys.executable, "-m", "safetyrepro.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_cli_reports_a_tampered_mirror_in_one_line(tmp_path, data_dir):
    mirror = tmp_path / "mirror" / "xstest"
    mirror.mkdir(parents=True)
    (mirror / "xstest_prompts.csv").write_bytes((data_dir / "xstest" / "xstest_prompts.csv").read_bytes()[:-10])
    out = _cli(
        ["items", "--benchmark", "xstest"],
        {"SAFETYREPRO_DATA_DIR": str(tmp_path / "mirror"), "SAFETYREPRO_CACHE_DIR": str(tmp_path / "c")},
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "checksum mismatch for xstest file" in out.stderr and XSTEST.files[0].sha256 in out.stderr


def test_cli_reports_a_missing_mirror_file_in_one_line(tmp_path):
    (tmp_path / "mirror").mkdir()
    out = _cli(
        ["--data-dir", str(tmp_path / "mirror"), "items", "--benchmark", "toxigen"],
        {"SAFETYREPRO_CACHE_DIR": str(tmp_path / "c"), "SAFETYREPRO_OFFLINE": "1"},
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "missing toxigen file extra/annotated_test.csv (sha256 31a15dda" in out.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["envelope", "--benchmark", "mmlu"], "unknown benchmark 'mmlu'; allowed: truthfulqa, bbq"),
        (["envelope", "--tier", "stresss"], "unknown tier 'stresss'"),
        (["items", "--benchmark", "bbq", "--show", "0"], None),
    ],
)
def test_cli_input_errors(args, needle, data_dir):
    out = _cli(args, {})
    if needle is None:
        assert out.returncode == 0 and "Passage:" in out.stdout
        return
    assert out.returncode == 2 and needle in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_cli_rules_file_errors(tmp_path):
    rules = Path(__file__).resolve().parents[2] / "safetyrepro_tasks" / "envelope.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(rules.read_bytes().replace(b"require: {decoding: [greedy]}", b"require: {decoding: [greedyy]}"))
    out = _cli(["envelope", "--rules", str(bad)], {})
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "constraint 'logprob is greedy-only' has unknown decoding value 'greedyy'" in out.stderr
