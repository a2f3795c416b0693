"""The prefix KV store (keys, LRU, memory bound), the KV slab, and the span attention: fast, no model."""

from __future__ import annotations

import pytest
import torch

from safetyrepro.adapters.engine.prefix_cache import (
    DEFAULT_CHUNK_SIZE,
    ENV_CHUNK,
    ENV_ENABLED,
    ENV_MAX_MB,
    PrefixStore,
    chunk_keys,
    chunk_size_from_env,
    enabled_from_env,
    max_bytes_from_env,
)


def _t(n_bytes: int) -> torch.Tensor:
    return torch.zeros(n_bytes // 2, dtype=torch.bfloat16)


# --------------------------------------------------------------------------- keys


def test_chunk_keys_cover_full_chunks_only():
    toks = list(range(10))
    assert len(chunk_keys(toks, 4)) == 2  # 0-3, 4-7; the partial 8-9 gets no key
    assert len(chunk_keys(toks, 5)) == 2 and len(chunk_keys(toks, 11)) == 0
    assert len(chunk_keys(toks, 4, n_chunks=1)) == 1
    assert all(isinstance(k, bytes) and len(k) == 16 for k in chunk_keys(toks, 2))


def test_a_key_names_the_whole_prefix():
    a = chunk_keys([1, 2, 3, 4, 5, 6], 2)
    b = chunk_keys([1, 2, 3, 4, 9, 9], 2)
    c = chunk_keys([9, 2, 3, 4, 5, 6], 2)
    assert a[:2] == b[:2] and a[2] != b[2]  # same prefix, same keys, up to where they part
    assert all(x != y for x, y in zip(a, c, strict=True))  # a different first token changes every key
    assert chunk_keys([1, 2, 3, 4], 2)[1] != chunk_keys([3, 4, 1, 2], 2)[1]  # order matters
    assert chunk_keys([1, 2, 3, 4], 2)[1] != chunk_keys([1, 2, 3, 4], 4)[0]  # the chunk size is in the key
    assert chunk_keys([12, 3], 2) != chunk_keys([1, 23], 2)  # token boundaries are in the key


def test_env_settings(monkeypatch):
    for v, want in (("", True), ("1", True), ("0", False), ("off", False), ("False", False), ("no", False)):
        monkeypatch.setenv(ENV_ENABLED, v)
        assert enabled_from_env() is want
    monkeypatch.delenv(ENV_ENABLED)
    assert enabled_from_env() is True
    monkeypatch.setenv(ENV_MAX_MB, "1.5")
    assert max_bytes_from_env() == int(1.5 * 2**20)
    monkeypatch.delenv(ENV_CHUNK, raising=False)
    assert chunk_size_from_env() == DEFAULT_CHUNK_SIZE
    monkeypatch.setenv(ENV_CHUNK, "16")
    assert chunk_size_from_env() == 16
    monkeypatch.setenv(ENV_CHUNK, "1")
    with pytest.raises(ValueError):
        chunk_size_from_env()


# --------------------------------------------------------------------------- the store


def test_longest_prefix_stops_at_the_first_missing_chunk():
    s = PrefixStore(max_bytes=10_000)
    k = chunk_keys(list(range(8)), 2)
    vals = [_t(100) for _ in k]
    s.put(k[0], vals[0])
    s.put(k[1], vals[1])
    s.put(k[3], vals[3])  # chunk 2 missing: chunk 3 is useless on its own
    got = s.longest_prefix(k)
    assert len(got) == 2 and got[0] is vals[0] and got[1] is vals[1]
    assert s.stats.hits == 2 and s.stats.misses == 1
    assert s.longest_prefix([]) == [] and s.get(b"nope") is None


def test_memory_bound_and_lru_order():
    s = PrefixStore(max_bytes=1000)
    for i in range(5):
        s.put(bytes([i]), _t(300))
        assert s.nbytes <= 1000
    assert len(s) == 3 and s.nbytes == 900 and s.stats.evictions == 2
    assert bytes([0]) not in s and bytes([1]) not in s
    s.get(bytes([2]))  # touched: now the most recent
    s.put(bytes([9]), _t(300))
    assert bytes([2]) in s and bytes([3]) not in s and bytes([4]) in s
    s.put(bytes([9]), _t(200))  # replacing a key re-counts its bytes
    assert s.nbytes == 800 and len(s) == 3
    s.put(b"huge", _t(2000))  # larger than the whole bound: not kept, nothing evicted for it
    assert b"huge" not in s and len(s) == 3
    s.clear()
    assert len(s) == 0 and s.nbytes == 0


def test_a_prefix_is_evicted_from_its_deep_end():
    """put_prefix and longest_prefix leave shallow chunks most recent: under pressure a prefix
    loses its deep end first, and its start stays usable."""
    s = PrefixStore(max_bytes=4 * 100)
    keys = chunk_keys(list(range(8)), 2)  # 4 chunks
    s.put_prefix([(k, _t(100)) for k in keys])
    assert len(s.longest_prefix(keys)) == 4
    s.put(b"other", _t(100))  # one chunk must go: the deepest
    assert keys[3] not in s and all(k in s for k in keys[:3])
    assert len(s.longest_prefix(keys)) == 3
    s.put(b"other2", _t(200))  # the least recent ("other", untouched since), then the deepest chunk
    assert b"other" not in s and keys[2] not in s and len(s.longest_prefix(keys)) == 2


# --------------------------------------------------------------------------- slab and span attention


def test_kv_slab_writes_in_place_and_returns_views():
    from safetyrepro.adapters.engine.kv_slab import KVSlab

    buf = torch.zeros(2, 3, 2, 1, 6, 4)  # batch, layers, k/v, heads, capacity, dim
    slab = KVSlab(buf, 2)
    k = torch.ones(2, 1, 3, 4)
    keys, values = slab.cache.layers[1].update(k, 2 * k)
    assert (
        keys.shape == (2, 1, 5, 4) and torch.equal(buf[:, 1, 0, :, 2:5], k) and torch.equal(buf[:, 1, 1, :, 2:5], 2 * k)
    )
    assert keys.data_ptr() == buf[:, 1, 0].data_ptr()  # a view, no copy
    assert slab.cache.layers[1].get_seq_length() == 5 and slab.cache.layers[0].get_seq_length() == 2
    with pytest.raises(RuntimeError, match="full"):
        slab.cache.layers[1].update(k, k)
    # packed writes: token ranges of row 0 into given slab rows and columns
    buf = torch.zeros(2, 1, 2, 1, 6, 1)
    slab = KVSlab(buf, 0, writes=[(1, 3, 0, 2), (0, 0, 2, 3)])
    toks = torch.arange(1.0, 4.0).view(1, 1, 3, 1)
    keys, _ = slab.cache.layers[0].update(toks, toks)
    assert buf[1, 0, 0, 0, 3:5, 0].tolist() == [1.0, 2.0] and buf[0, 0, 0, 0, 0, 0].item() == 3.0
    assert keys.shape == (2, 1, 6, 1)


def test_span_mask_is_causal_bottom_right_with_window():
    from safetyrepro.adapters.engine.rowwise_attention import span_mask

    memo: dict = {}
    assert span_mask(4, 4, None, memo, "cpu") is None  # plain causal: SDPA's is_causal
    m = span_mask(2, 5, None, memo, "cpu")[0, 0]
    assert m.tolist() == [[True] * 4 + [False], [True] * 5]
    one = span_mask(1, 7, None, memo, "cpu")
    assert one.shape == (1, 1, 1, 7) and bool(one.all())
    w = span_mask(3, 6, 2, memo, "cpu")[0, 0]  # query positions 3, 4, 5 see (p-2, p]
    assert w.tolist() == [
        [False, False, True, True, False, False],
        [False, False, False, True, True, False],
        [False, False, False, False, True, True],
    ]
    assert span_mask(4, 4, 8, memo, "cpu") is None  # a window wider than the span changes nothing


class _Module(torch.nn.Module):
    def __init__(self, heads: int, kv_heads: int):
        super().__init__()
        self.num_key_value_groups = heads // kv_heads
        self.is_causal = True


def test_span_attention_equals_each_block_alone():
    """Query blocks packed in one sequence, keys read from other rows, several decode rows in one
    call: each block's output equals the block run alone, to the bit."""
    from safetyrepro.adapters.engine.rowwise_attention import rowwise_sdpa_forward, span_mask
    from safetyrepro.compat.transformers import sdpa_attention_forward

    torch.manual_seed(0)
    heads, kv_heads, dim, dt = 6, 2, 16, torch.bfloat16
    module = _Module(heads, kv_heads)
    q = torch.randn(1, heads, 11, dim, dtype=dt)
    k = torch.randn(3, kv_heads, 9, dim, dtype=dt)
    v = torch.randn(3, kv_heads, 9, dim, dtype=dt)
    spans = [(0, 0, 4, 0, 0, 4), (0, 4, 7, 2, 0, 9), (0, 7, 8, 1, 0, 5), (0, 8, 11, 1, 2, 5)]
    out, _ = rowwise_sdpa_forward(module, q, k, v, None, sr_spans=spans, scaling=dim**-0.5)
    for q_row, q_lo, q_hi, kv_row, k_lo, k_hi in spans:
        m = span_mask(q_hi - q_lo, k_hi - k_lo, None, {}, "cpu")
        alone, _ = sdpa_attention_forward(
            module,
            q[q_row : q_row + 1, :, q_lo:q_hi].clone(),
            k[kv_row : kv_row + 1, :, k_lo:k_hi].clone(),
            v[kv_row : kv_row + 1, :, k_lo:k_hi].clone(),
            m,
            scaling=dim**-0.5,
        )
        assert torch.equal(out[q_row, q_lo:q_hi], alone[0])
    # decode: one query per row, rows 1-3 share a key range (one SDPA call), row 0 idle
    q = torch.randn(4, heads, 1, dim, dtype=dt)
    k = torch.randn(4, kv_heads, 30, dim, dtype=dt)
    v = torch.randn(4, kv_heads, 30, dim, dtype=dt)
    spans = [(0, 0, 0, 0, 0, 0)] + [(b, 0, 1, b, 7, 30) for b in (1, 2, 3)]
    out, _ = rowwise_sdpa_forward(module, q, k, v, None, sr_spans=spans, scaling=dim**-0.5)
    assert torch.count_nonzero(out[0]) == 0
    for b in (1, 2, 3):
        alone, _ = sdpa_attention_forward(
            module,
            q[b : b + 1].clone(),
            k[b : b + 1, :, 7:].clone(),
            v[b : b + 1, :, 7:].clone(),
            span_mask(1, 23, None, {}, "cpu"),
            scaling=dim**-0.5,
        )
        assert torch.equal(out[b], alone[0])


def _tiled_layer(shape, dtype):
    from safetyrepro.adapters.engine.row_tiles import tile_linears

    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(*shape, bias=False).to(dtype))
    assert tile_linears(layer) == 1
    return layer


@pytest.mark.parametrize("shape", [(576, 1536), (1536, 576), (576, 192)])
def test_bf16_linear_rows_do_not_depend_on_the_other_rows(shape):
    """What packing chunks of many prompts into one forward pass relies on: the engine's linear layers
    (row_tiles) compute each row the same way whatever the number of rows, its place, or the other rows,
    on any CPU. A plain GEMM does not promise it: on CPUs with AMX (and in MKL's float32 kernels) a row
    computed among 7, 32 or 64 rows differs in the last bits from the same row among 300."""
    layer = _tiled_layer(shape, torch.bfloat16)
    x = torch.randn(300, shape[0]).to(torch.bfloat16)
    with torch.inference_mode():
        ref = layer(x)
        assert torch.allclose(ref.float(), (x.float() @ layer[0].weight.float().T), rtol=0.02, atol=0.05)
        for m in (1, 2, 3, 7, 31, 32, 33, 64, 97, 256):
            for start in (0, 1, 300 - m):
                assert torch.equal(layer(x[start : start + m]), ref[start : start + m]), (m, start)
        assert torch.equal(layer(x[None, 5:40])[0], ref[5:40])  # [1, N, H], as a packed forward has it
        other = x.clone()
        other[40:] = torch.randn(260, shape[0]).to(torch.bfloat16)  # other rows' content changes nothing
        assert torch.equal(layer(other)[:40], ref[:40])


@pytest.mark.parametrize("shape", [(576, 49152), (896, 8192)])
def test_exact_head_rows_do_not_depend_on_the_other_rows(shape):
    """The float32 head that scores continuations (Engine._logits(exact=True)) runs in row tiles
    (row_tiles): a float32 GEMM computes a partial block of rows another way, so
    without the padding a row's last bits would depend on how many rows share the call."""
    from safetyrepro.adapters.engine.engine import Engine

    torch.manual_seed(0)
    eng = Engine.__new__(Engine)
    eng._head = torch.nn.Linear(*shape, bias=False).to(torch.bfloat16)
    eng._softcap, eng._head_fp32 = None, None
    x = torch.randn(200, shape[0]).to(torch.bfloat16)
    with torch.inference_mode():
        ref = eng._logits(x, exact=True)
        assert ref.dtype == torch.float32
        plain = x.float() @ eng._head.weight.float().T
        assert torch.allclose(ref, plain, rtol=0, atol=1e-4)  # the float32 product, not bf16-rounded
        assert not torch.equal(ref, eng._logits(x).float())  # the model-dtype head rounds
        for m in (1, 2, 3, 5, 6, 7, 9, 31, 64, 97):
            for start in (0, 1, 200 - m):
                assert torch.equal(eng._logits(x[start : start + m], exact=True), ref[start : start + m]), (m, start)


# --------------------------------------------------------------------------- decode steps


def test_decode_slab_writes_each_row_at_its_own_column():
    """A layer-major decode slab: row b's new token goes to column cols[b], and the layer returns the
    first `width` columns of every row, as views (no copy)."""
    from safetyrepro.adapters.engine.kv_slab import KVSlab

    buf = torch.zeros(2, 2, 3, 1, 8, 2)  # layers, k/v, batch, heads, capacity, dim
    cols = torch.tensor([0, 5, 2])
    slab = KVSlab(buf, 0, cols=cols, width=6, layer_major=True)
    k = torch.arange(1.0, 4.0).view(3, 1, 1, 1).expand(3, 1, 1, 2)
    keys, values = slab.cache.layers[1].update(k, -k)
    assert keys.shape == (3, 1, 6, 2) and keys.data_ptr() == buf[1, 0].data_ptr()
    assert buf[1, 0, :, 0, :, 0].tolist() == [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 2, 0, 0],
        [0, 0, 3, 0, 0, 0, 0, 0],
    ]
    assert torch.equal(values, -keys) and int(buf[0].count_nonzero()) == 0  # layer 0 untouched
    with pytest.raises(ValueError, match="capacity"):
        KVSlab(buf, 0, cols=cols, width=9, layer_major=True)


def _decode_inputs(dtype, rows=13, heads=6, kv_heads=2, dim=16, width=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, heads, 1, dim, generator=g).to(dtype)
    k = torch.randn(rows, kv_heads, width, dim, generator=g).to(dtype)
    v = torch.randn(rows, kv_heads, width, dim, generator=g).to(dtype)
    key_len = torch.randint(1, width + 1, (rows,), generator=g)
    for b, n in enumerate(key_len.tolist()):  # what a decode slab holds beyond a row's keys: zeros
        k[b, :, n:] = 0
        v[b, :, n:] = 0
    return q, k, v, key_len


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [None, 7])
def test_decode_attention_is_each_row_alone_to_the_bit(dtype, window):
    """A decode step's attention (all rows in one call, each masked to its own keys) gives every row
    the bits it gets alone at its own width, in float32 as in bf16, and the numbers of attention
    over exactly its keys (SDPA, to float rounding)."""
    from safetyrepro.adapters.engine.engine import DECODE_KEY_BLOCK
    from safetyrepro.adapters.engine.rowwise_attention import rowwise_sdpa_forward, span_mask
    from safetyrepro.compat.transformers import sdpa_attention_forward

    heads, kv_heads, dim = 6, 2, 16
    module = _Module(heads, kv_heads)
    module.sliding_window = window
    q, k, v, key_len = _decode_inputs(dtype)
    out, _ = rowwise_sdpa_forward(module, q, k, v, None, sr_key_len=key_len, scaling=dim**-0.5)
    assert out.shape == (13, 1, heads, dim) and out.dtype == dtype
    for b, n in enumerate(key_len.tolist()):
        w = -(-n // DECODE_KEY_BLOCK) * DECODE_KEY_BLOCK
        alone, _ = rowwise_sdpa_forward(
            module,
            q[b : b + 1].clone(),
            k[b : b + 1, :, :w].clone(),
            v[b : b + 1, :, :w].clone(),
            None,
            sr_key_len=key_len[b : b + 1],
            scaling=dim**-0.5,
        )
        assert torch.equal(out[b], alone[0]), b
        lo = 0 if window is None else max(0, n - window)
        ref, _ = sdpa_attention_forward(
            module,
            q[b : b + 1].float(),
            k[b : b + 1, :, lo:n].float(),
            v[b : b + 1, :, lo:n].float(),
            span_mask(1, n - lo, None, {}, "cpu"),
            scaling=dim**-0.5,
        )
        assert torch.allclose(out[b].float(), ref[0], atol=1e-5 if dtype == torch.float32 else 1e-2), b
    # a row whose keys were garbage beyond its length would still come out the same: only zeros are
    # read there, and a masked zero key adds exact zeros
    k2, v2 = k.clone(), v.clone()
    k2[0, :, key_len[0] :] = 0
    out2, _ = rowwise_sdpa_forward(module, q, k2, v2, None, sr_key_len=key_len, scaling=dim**-0.5)
    assert torch.equal(out, out2)


@pytest.mark.parametrize("shape", [(576, 1536), (1536, 576), (576, 49152)])
def test_float32_linear_rows_do_not_depend_on_the_other_rows(shape):
    """What float32 decoding and scoring rely on: the engine's float32 linear layers compute each row the
    same way whatever the number of rows around it, partial blocks of rows included."""
    layer = _tiled_layer(shape, torch.float32)
    x = torch.randn(200, shape[0])
    with torch.inference_mode():
        ref = layer(x)
        assert torch.allclose(ref, x @ layer[0].weight.T, rtol=0, atol=1e-4)
        for m in (1, 2, 3, 5, 7, 8, 9, 31, 33, 64, 97, 199):
            for start in (0, 200 - m):
                assert torch.equal(layer(x[start : start + m]), ref[start : start + m]), (m, start)


def test_only_plain_linear_layers_are_tiled():
    """Quantised subclasses of Linear (bitsandbytes' NF4 layers) keep their own kernels; nothing but the
    instance changes (a fresh Linear computes as before)."""
    from safetyrepro.adapters.engine.row_tiles import tile_linears

    class Quantised(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Quantised(4, 4), torch.nn.ReLU())
    assert tile_linears(model) == 1
    assert "forward" in vars(model[0]) and "forward" not in vars(model[1])
    assert "forward" not in vars(torch.nn.Linear(4, 4))


def test_decode_rows_come_from_the_work_and_the_memory(monkeypatch):
    from safetyrepro.adapters.engine.engine import DECODE_MAX_ROWS, Engine
    from safetyrepro.errors import UserError

    eng = Engine.__new__(Engine)
    eng._kv_dims, eng._kv_dtype = (30, 3, 64), torch.float32  # SmolLM2: 46,080 bytes a token
    monkeypatch.delenv("SAFETYREPRO_DECODE_KV_MB", raising=False)
    assert eng.decode_rows(100) == DECODE_MAX_ROWS  # 192 rows of 100 tokens: 845 MiB
    assert eng.decode_rows(1000) == int(2048 * 2**20 // (1000 * 46080)) == 46
    monkeypatch.setenv("SAFETYREPRO_DECODE_KV_MB", "100")
    assert eng.decode_rows(1000) == 2  # never fewer than two
    monkeypatch.setenv("SAFETYREPRO_DECODE_KV_MB", "lots")
    with pytest.raises(UserError, match="SAFETYREPRO_DECODE_KV_MB"):
        eng.decode_rows(10)
