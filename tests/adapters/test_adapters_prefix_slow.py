"""Chunked prefill with prefix reuse on SmolLM2 (bf16, CPU): the prefix KV store and in-batch
sharing change no number (store on vs off, cold vs warm, batch size 1 vs 8, a tiny store that
evicts), on few-shot prompts, multi-seed sampled batches and multiple-choice requests; and what
chunking moves relative to a one-shot forward (lm-eval's HFLM)."""

from __future__ import annotations

import contextlib

import pytest

from safetyrepro.adapters.engine.engine import GenRequest, LoglikRequest

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # heavy: `make test-heavy`, not CI (see .ci/run)

DEMOS = [
    ("What is the capital of France?", "Paris"),
    ("How many legs does a spider have?", "Eight"),
    ("What do bees make?", "Honey"),
    ("Which planet is known as the Red Planet?", "Mars"),
    ("What is 2 + 2?", "4"),
    ("Which is the largest ocean?", "The Pacific Ocean"),
]
ITEMS = [
    ("Which animal says meow?", [" cat", " dog", " a small cow", " duck"]),
    ("What color is the sky on a clear day?", [" blue", " green", " it is red", " black"]),
    ("Is it safe to drink bleach?", [" No, it is poisonous", " Yes", " Only a little"]),
    ("Water freezes at what temperature in Celsius?", [" 0 degrees", " 100 degrees"]),
]


def _fewshot_text(q: str) -> str:
    return "".join(f"Question: {dq}\nAnswer: {da}\n\n" for dq, da in DEMOS) + f"Question: {q}\nAnswer:"


def _fewshot_chat(engine, q: str) -> str:
    msgs = [m for dq, da in DEMOS for m in ({"role": "user", "content": dq}, {"role": "assistant", "content": da})]
    return engine.render([{"role": "system", "content": "Answer briefly."}, *msgs, {"role": "user", "content": q}])


@contextlib.contextmanager
def _setting(engine, prefix_cache: bool, chunk_size: int | None = None, max_bytes: int | None = None):
    """The engine with prefix reuse on or off (and another chunk size or store bound), from an empty store."""
    saved = engine.prefix_cache, engine.chunk_size, engine.prefix_store.max_bytes
    engine.prefix_cache = prefix_cache
    engine.chunk_size = chunk_size or saved[1]
    engine.prefix_store.max_bytes = max_bytes or saved[2]
    engine.prefix_store.clear()
    try:
        yield engine
    finally:
        engine.prefix_cache, engine.chunk_size, engine.prefix_store.max_bytes = saved
        engine.prefix_store.clear()


@contextlib.contextmanager
def _count_prefill_tokens(monkeypatch, engine):
    """Counts the tokens the engine's prefill passes compute."""
    counted = [0]
    orig = type(engine)._prefill_pass

    def counting(self, items, rows, lens, *args):
        C = self.chunk_size
        counted[0] += sum(min(lens[r], (j + 1) * C) - j * C for _, (r, j) in items)
        return orig(self, items, rows, lens, *args)

    monkeypatch.setattr(type(engine), "_prefill_pass", counting)
    yield counted
    monkeypatch.undo()


def _mc_requests(engine, chat: bool) -> list[LoglikRequest]:
    reqs = []
    for q, cands in ITEMS:
        ctx = _fewshot_chat(engine, q) if chat else _fewshot_text(q)
        reqs += [LoglikRequest(ctx, c.strip() if chat else c) for c in cands]
    return reqs + [LoglikRequest("Hi", " there"), LoglikRequest("", "The quick brown fox jumps over the lazy dog.")]


def test_loglik_prefix_reuse_is_bit_exact(smollm2, monkeypatch):
    reqs = _mc_requests(smollm2, chat=False) + _mc_requests(smollm2, chat=True)
    n_tokens = [len(smollm2.tok_encode(r.context)) for r in reqs]
    assert max(n_tokens) > 4 * smollm2.chunk_size  # several chunks, shared by the items and candidates
    with _setting(smollm2, False) as e, _count_prefill_tokens(monkeypatch, e) as work_off:
        ref = e.loglikelihood(reqs, batch_size=8)  # batch size 1 with the store off: test_adapters_engine_slow
        assert len(e.prefix_store) == 0
    with _setting(smollm2, True) as e, _count_prefill_tokens(monkeypatch, e) as work_on:
        cold = e.loglikelihood(reqs, batch_size=8)
        first = work_on[0]
        warm = e.loglikelihood(reqs, batch_size=8)  # the contexts' chunks now come from the store
        assert e.prefix_store.stats.hits > 0 and work_on[0] - first < first
        e.prefix_store.clear()
        one = e.loglikelihood(reqs, batch_size=1)
        alone = [e.loglikelihood([r])[0] for r in reqs[::5]]  # each request in a call of its own, warm store
    assert cold == ref and warm == ref and one == ref and alone == ref[::5]
    print(f"\nprefill tokens for {len(reqs)} requests: store off {work_off[0]}, on {first} (cold)")
    assert first < work_off[0] / 2  # shared demonstrations and contexts computed once


@pytest.mark.parametrize("chunk_size", [8])
def test_loglik_same_with_a_tiny_store_and_other_chunk_sizes(smollm2, chunk_size):
    """A store too small for the cell evicts all the time; numbers stay those of no store at all."""
    reqs = _mc_requests(smollm2, chat=True)
    with _setting(smollm2, False, chunk_size) as e:
        ref = e.loglikelihood(reqs, batch_size=3)
    with _setting(smollm2, True, chunk_size, max_bytes=2 * 2**20) as e:
        got = [e.loglikelihood(reqs[i : i + 3], batch_size=2) for i in range(0, len(reqs), 3)]
        assert e.prefix_store.stats.evictions > 0 and e.prefix_store.nbytes <= 2 * 2**20
    assert [x for g in got for x in g] == ref


def _gen_requests(engine) -> list[GenRequest]:
    fewshot = [GenRequest(_fewshot_chat(engine, q), 24) for q, _ in ITEMS]
    sampled = [
        GenRequest(_fewshot_chat(engine, q), 20, temperature=0.7, top_p=0.9, seed=s)
        for q in ("Name a fruit.", "Write a haiku about cats.")
        for s in (1, 2, 3)
    ]
    other = [
        GenRequest(engine.render([{"role": "user", "content": "List three colors."}]), 30, stop=("\n",)),
        GenRequest(engine.render([{"role": "user", "content": "Hi!"}]), 12, temperature=1.0, seed=11),
        GenRequest(_fewshot_text("Which animal says meow?"), 8),
    ]
    return fewshot + sampled + other


def test_generation_prefix_reuse_is_bit_exact(smollm2):
    reqs = _gen_requests(smollm2)
    with _setting(smollm2, False) as e:
        ref = e.generate_detailed(reqs, batch_size=8)  # batch size 1 with the store off: test_adapters_engine_slow
    texts = [g.text for g in ref]
    assert len(set(texts[4:7])) == 3 and len(set(texts[7:10])) == 3  # the seeds differ
    assert all(texts[:4]) and ref[-3].finish_reason == "stop" and "\n" not in texts[-3]
    with _setting(smollm2, True) as e:
        assert e.generate_detailed(reqs, batch_size=8) == ref
        assert e.generate_detailed(reqs, batch_size=1) == ref  # warm store
        e.prefix_store.clear()
        assert e.generate_detailed(reqs[::-1], batch_size=3) == ref[::-1]
        e.prefix_store.clear()
        seeds_apart = [
            e.generate_detailed([r])[0] for r in reqs[4:10]
        ]  # one seed per call: the store serves the prompt
        assert e.prefix_store.stats.hits > 0
    assert seeds_apart == ref[4:10]


def test_short_inputs_equal_a_one_shot_forward_and_long_ones_stay_close(smollm2):
    """Inputs of at most one chunk are computed exactly as a one-shot forward does (HFLM); longer
    ones attend chunk by chunk: bf16 numbers move, the model's choice does not."""
    import torch

    def one_shot(ctx, cont):
        x = ctx + cont
        with torch.inference_mode():
            lp = smollm2.model(torch.tensor([x[:-1]])).logits[0, -len(cont) :].float().log_softmax(-1)
        return lp.gather(1, torch.tensor(cont)[:, None]).sum().item()

    gaps, long_items = [], 0
    for q, cands in ITEMS:
        for ctx_text in (f"Question: {q}\nAnswer:", _fewshot_text(q), 4 * _fewshot_text("Why?") + _fewshot_text(q)):
            pairs = [smollm2.encode_pair(ctx_text, c) for c in cands]
            ours = [ll for ll, _ in smollm2.loglikelihood_tokens(pairs, exact=False)]  # HFLM's model-dtype head
            ref = [one_shot(c, k) for c, k in pairs]
            if max(len(c) + len(k) - 1 for c, k in pairs) <= smollm2.chunk_size:
                assert ours == ref
            else:
                long_items += 1
                gaps += [abs(a - b) for a, b in zip(ours, ref, strict=True)]
                assert ours.index(max(ours)) == ref.index(max(ref))
    print(f"\nchunked vs one-shot on {long_items} few-shot items: max |diff| {max(gaps):.4f} nats")
    assert long_items == 2 * len(ITEMS) and max(gaps) <= 0.5
