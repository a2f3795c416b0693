"""A GGUF model is dequantised once per precision into a cached HF folder, and loads after that read
the folder: the same tensors and tokenizer as dequantising the GGUF, a damaged folder is written
again, and `models export` copies the folder."""

from __future__ import annotations

import json
import time

import pytest
import torch

from safetyrepro.adapters.catalogue import loading
from safetyrepro.adapters.catalogue.weights import resolve_weights

pytestmark = pytest.mark.slow


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models" / "hf"


def test_cached_folder_loads_the_gguf_tensors_and_tokenizer(empty_cache, tmp_path):
    resolved = resolve_weights("smollm2")
    t0 = time.perf_counter()
    direct, direct_tok = loading._load_gguf(resolved, "fp32")
    t_gguf = time.perf_counter() - t0
    loading.load_hf(resolved, "fp32")  # writes the folder
    (folder,) = empty_cache.iterdir()
    assert folder.name == f"smollm2-{resolved.weights_sha256()[:12]}-fp32"
    assert json.loads((folder / loading.SOURCE_FILE).read_text())["source_sha256"] == resolved.weights_sha256()
    t0 = time.perf_counter()
    model, tok = loading.load_hf(resolved, "fp32")
    t_folder = time.perf_counter() - t0
    print(f"\nSmolLM2 fp32: GGUF dequantisation {t_gguf:.1f} s, cached folder {t_folder:.1f} s")
    want, got = direct.state_dict(), model.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    text = "<|im_start|>user\nIs it safe to drink bleach? Ünïcödé 🙂\t\ttabs<|im_end|>\n"
    assert tok(text)["input_ids"] == direct_tok(text)["input_ids"]
    assert tok.chat_template == direct_tok.chat_template and tok.eos_token == direct_tok.eos_token

    # a folder left damaged (a crash mid-write, a full disk) is written again, not a dead end
    for f in folder.glob("*.safetensors"):
        f.write_bytes(b"\0" * 16)
    again, _ = loading.load_hf(resolved, "fp32")
    assert all(torch.equal(want[k], v) for k, v in again.state_dict().items())

    out = loading.export_hf_folder(resolved, tmp_path / "exported", "fp32")
    assert sorted(p.name for p in out.iterdir() if p.name != ".safetyrepro-output.json") == sorted(
        p.name for p in folder.iterdir()
    )
    assert not list(empty_cache.parent.glob("hf/.*.tmp")) and not list(tmp_path.glob(".*.tmp"))
