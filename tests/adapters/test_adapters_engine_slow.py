"""The engine on SmolLM2-135M (bf16, CPU): batch invariance, greedy and seeded sampling, stops,
lm-eval equivalence with `--model hf` (exact within one prefill chunk, close beyond), NF4 against
bf16, the Inspect provider, and errors. Prefix reuse: test_adapters_prefix_slow.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from safetyrepro.adapters.engine.engine import GenRequest, LoglikRequest

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # heavy: `make test-heavy`, not CI (see .ci/run)

CONTEXTS = [
    "The capital of France is",
    "Question: What is 2+2?\nAnswer:",
    "Once upon a time there was a little girl who lived in a village near the forest. She",
    "Hi",
    "",
]
CONTINUATIONS = [" Paris", " Berlin", " 4", " four", " went to the market.", " x"]
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about cats.",
    "List three colors.",
    "Hi!",
    "Explain gravity in one sentence.",
    "What is 7 times 8?",
    "Name a fruit.",
    "Say something funny.",
]


def _chat(engine, q: str) -> str:
    return engine.render([{"role": "user", "content": q}])


def test_info_and_render(smollm2):
    info = smollm2.info
    assert info.label == "smollm2" and info.precision == "bf16" and info.device == "cpu"
    assert info.weights_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert info.has_chat_template and 134_000_000 < info.n_params < 135_000_000
    assert info.attention == "safetyrepro_rowwise" and info.max_length == 8192
    prompt = smollm2.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def _one_shot(engine, x: list[int], n: int, exact: bool) -> float:
    """Summed log-probability of the last n tokens of x from one plain forward (HFLM with batch size
    1), with the model's own head or with the float32 head on the upcast final hidden state."""
    import torch

    with torch.inference_mode():
        ids = torch.tensor([x[:-1]])
        if exact:
            hidden = engine.model.base_model(ids).last_hidden_state[0, -n:].float()
            logits = hidden @ engine.model.get_output_embeddings().weight.float().T
        else:
            logits = engine.model(ids).logits[0, -n:].float()
        lp = logits.log_softmax(-1)
    return lp.gather(1, torch.tensor(x[-n:])[:, None]).sum().item()


def test_loglik_does_not_depend_on_batching(smollm2):
    reqs = [LoglikRequest(c, k) for c in CONTEXTS for k in CONTINUATIONS]
    assert smollm2.exact_scores  # the float32 head is the default
    one = smollm2.loglikelihood(reqs, batch_size=1)
    assert smollm2.loglikelihood(reqs, batch_size=8) == one  # bit for bit
    assert smollm2.loglikelihood(reqs[::-1], batch_size=5) == one[::-1]
    # and equal to a plain full-logits forward of each request alone (HFLM with batch size 1): these
    # inputs fit in one prefill chunk (longer ones: test_adapters_prefix_slow)
    assert max(sum(map(len, smollm2.encode_pair(r.context, r.continuation))) for r in reqs) <= smollm2.chunk_size
    model_head = smollm2.loglikelihood(reqs, batch_size=3, exact=False)
    gaps = []
    for r, (ll, _), (ll_model, _) in zip(reqs, one, model_head, strict=True):
        ctx, cont = smollm2.encode_pair(r.context, r.continuation)
        x = ctx + cont
        if len(x) < 3:
            continue  # a one-token input runs through the batched kernel path on purpose (engine docs)
        assert abs(ll - _one_shot(smollm2, x, len(cont), exact=True)) <= 1e-4, r
        assert abs(ll_model - _one_shot(smollm2, x, len(cont), exact=False)) <= 1e-4, r
        gaps.append(abs(ll - ll_model))
    # the bf16 head rounds logits to multiples of 1/8 at their usual magnitude: the two heads differ
    # by up to about that much per token, and never by more
    print(f"\nfloat32 head vs bf16 head: max |diff| {max(gaps):.4f} nats over {len(gaps)} requests")
    assert 0 < max(gaps) < 0.25
    by = {(r.context, r.continuation): v for r, v in zip(reqs, one, strict=True)}
    assert by[("The capital of France is", " Paris")][0] > by[("The capital of France is", " Berlin")][0]
    assert by[("Question: What is 2+2?\nAnswer:", " 4")][1] is True  # " 4" is the greedy answer


def test_greedy_generation_does_not_depend_on_batching(smollm2):
    import torch

    reqs = [GenRequest(_chat(smollm2, q), 20) for q in QUESTIONS]
    one = smollm2.generate(reqs, batch_size=1)
    eight = smollm2.generate(reqs, batch_size=8)
    assert one == eight
    assert one[0] == "The capital of France is Paris."
    assert len(set(one)) == len(one) and all(t.strip() for t in one)
    # true greedy: the same text as transformers' generate(do_sample=False)
    ids = torch.tensor([smollm2.tok_encode(reqs[0].prompt)])
    with torch.inference_mode():
        out = smollm2.model.generate(ids, do_sample=False, max_new_tokens=20)
    assert smollm2.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True) == one[0]


def test_seeded_sampling_is_reproducible(smollm2):
    prompt = _chat(smollm2, "Write a haiku about cats.")
    reqs = [GenRequest(prompt, 24, temperature=0.9, top_p=0.95, seed=s) for s in (1, 1, 2, 3)]
    texts = smollm2.generate(reqs, batch_size=4)
    assert texts[0] == texts[1]  # same seed, same text
    assert len(set(texts[1:])) == 3  # different seeds, different texts
    alone = smollm2.generate([reqs[2]], batch_size=1)
    mixed = smollm2.generate([GenRequest(_chat(smollm2, "Hi!"), 8), reqs[2], GenRequest(prompt, 30)], batch_size=3)
    assert alone[0] == texts[2] == mixed[1]  # independent of the batch around it
    greedy = smollm2.generate([GenRequest(prompt, 24)])[0]
    assert greedy not in texts
    unseeded = smollm2.generate_detailed([GenRequest(prompt, 4, temperature=1.0)])[0]
    assert unseeded.seed is not None  # a fresh seed, reported so that the run can be repeated
    again = smollm2.generate_detailed([GenRequest(prompt, 4, temperature=1.0, seed=unseeded.seed)])[0]
    assert again.text == unseeded.text


def test_stop_strings_eos_and_lengths(smollm2):
    prompt = _chat(smollm2, "List three colors.")
    full = smollm2.generate_detailed([GenRequest(prompt, 12)])[0]
    assert full.finish_reason == "length" and full.n_new_tokens == 12 and len(full.text.split()) >= 4
    # the reply's own third word as a stop string (greedy texts differ between CPUs' bf16 kernels)
    word = full.text.split()[2]
    cut = smollm2.generate_detailed([GenRequest(prompt, 12, stop=(word, "zzz"))])[0]
    assert cut.text == full.text[: full.text.index(word)] and cut.finish_reason == "stop"
    assert cut.n_new_tokens < 12  # the row stopped early
    short = smollm2.generate_detailed([GenRequest(_chat(smollm2, "What is the capital of France?"), 40)])[0]
    assert short.finish_reason == "stop" and short.text == "The capital of France is Paris."  # EOS, excluded
    assert "<|im_end|>" not in short.text and short.n_new_tokens == 8
    assert smollm2.generate([GenRequest(prompt, 0)]) == [""]


def _run_lm_eval(model, model_args, task_dir, limit=8, **kw):
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager

    res = simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=["sr_tiny_mc"],
        limit=limit,
        log_samples=True,
        task_manager=TaskManager(include_path=str(task_dir)),
        bootstrap_iters=0,
        **kw,
    )
    return {s["doc_id"]: [float(r[0][0]) for r in s["resps"]] for s in res["samples"]["sr_tiny_mc"]}


def _choice(v):
    return max(range(len(v)), key=lambda i: v[i])


def _untied(v) -> bool:
    from safetyrepro.tasks.benchmark import tied_winners

    return len(tied_winners(v)) == 1


def _engine_model_head(engine):
    """The engine as HFLM scores (the bf16 head), for the duration of a `with` block."""
    import contextlib

    @contextlib.contextmanager
    def ctx():
        engine.exact_scores = False
        try:
            yield engine
        finally:
            engine.exact_scores = True

    return ctx()


def test_lm_eval_safetyrepro_and_hf_choose_the_same(smollm2, smollm2_hf_folder, mc_task_dir):
    """`--model safetyrepro` vs `--model hf` on the exported folder. These 0-shot inputs fit in one
    prefill chunk, which the engine computes as HFLM's one-shot forward does: with the model-dtype
    head and HFLM's log-softmax in float32, the same numbers; with the float32 head (the default),
    numbers within the bf16 head's rounding and the same choice wherever HFLM's values do not tie."""
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    ours = _run_lm_eval(SafetyReproLM.from_engine(smollm2), None, mc_task_dir)
    with _engine_model_head(smollm2):
        ours_bf16_head = _run_lm_eval(SafetyReproLM.from_engine(smollm2), None, mc_task_dir)
    hf32 = _run_lm_eval("hf", f"pretrained={smollm2_hf_folder},softmax_dtype=float32", mc_task_dir, device="cpu")
    hf = _run_lm_eval("hf", f"pretrained={smollm2_hf_folder}", mc_task_dir, device="cpu", batch_size=4)

    assert sorted(ours) == list(range(8))
    print("\ndoc  safetyrepro  hf  hf(fp32 softmax)  max|diff| vs hf")
    for d in sorted(ours):
        gap = max(abs(a - b) for a, b in zip(ours[d], hf[d], strict=True))
        print(f"{d:3d}  {_choice(ours[d]):11d}  {_choice(hf[d]):2d}  {_choice(hf32[d]):16d}  {gap:.4f}")
        assert max(abs(a - b) for a, b in zip(ours_bf16_head[d], hf32[d], strict=True)) <= 1e-4
        assert _choice(ours_bf16_head[d]) == _choice(hf32[d]) == _choice(hf[d])
        assert _untied(ours[d])
        if _untied(hf32[d]):
            assert _choice(ours[d]) == _choice(hf32[d])
        assert max(abs(a - b) for a, b in zip(ours[d], hf32[d], strict=True)) < 0.25
        assert gap < 0.5  # HFLM: bf16 log-softmax, and right-padded batches (batch_size=4) move numbers


def test_lm_eval_few_shot_chunked_prefill_stays_close_to_hf(smollm2, smollm2_hf_folder, mc_task_dir):
    """3-shot contexts (53-65 tokens) span several prefill chunks: the engine attends chunk by chunk
    where HFLM runs one forward, which moves bf16 numbers (measured here: up to 0.20 nats, where a
    one-token last chunk takes SDPA's single-query path) but not the per-item choices."""
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    with _engine_model_head(smollm2):
        ours = _run_lm_eval(SafetyReproLM.from_engine(smollm2), None, mc_task_dir, limit=10, num_fewshot=3)
    hf32 = _run_lm_eval(
        "hf",
        f"pretrained={smollm2_hf_folder},softmax_dtype=float32",
        mc_task_dir,
        limit=10,
        device="cpu",
        num_fewshot=3,
    )
    gaps = [max(abs(a - b) for a, b in zip(ours[d], hf32[d], strict=True)) for d in sorted(ours)]
    print(
        f"\n3-shot, engine (bf16 head) vs HFLM (fp32 log-softmax): max |diff| {max(gaps):.4f} nats, "
        f"{sum(g == 0 for g in gaps)} of {len(gaps)} items identical"
    )
    assert sorted(ours) == list(range(10))
    assert all(_choice(ours[d]) == _choice(hf32[d]) for d in ours if _untied(ours[d]) and _untied(hf32[d]))
    assert max(gaps) <= 0.5


def test_nf4_scores_close_to_bf16(smollm2):
    """NF4 (bitsandbytes, CPU) against bf16 on the same items: close, not equal."""
    from safetyrepro.adapters.engine.engine import load_engine

    nf4 = load_engine("smollm2", "nf4", "cpu")
    assert nf4.info.precision == "nf4" and nf4.info.weights_sha256 == smollm2.info.weights_sha256
    assert any(type(m).__name__ == "Linear4bit" for m in nf4.model.modules())
    items = [
        ("Question: What is the capital of France?\nAnswer:", [" Paris", " London", " Berlin"]),
        ("Question: How many legs does a spider have?\nAnswer:", [" eight", " six"]),
        ("Question: What do bees make?\nAnswer:", [" honey", " milk"]),
        (_chat(smollm2, "Is it safe to drink bleach?"), ["No", "Yes"]),
    ]
    reqs = [LoglikRequest(c, k) for c, ks in items for k in ks]
    b, q = smollm2.loglikelihood(reqs), nf4.loglikelihood(reqs)
    diffs = [y[0] - x[0] for x, y in zip(b, q, strict=True)]
    print("\ncontinuation        bf16      nf4   nf4-bf16")
    for r, x, y, d in zip(reqs, b, q, diffs, strict=True):
        print(f"{r.continuation!r:14} {x[0]:9.3f} {y[0]:8.3f} {d:+9.3f}")
    mean_abs = sum(abs(d) for d in diffs) / len(diffs)
    print(f"mean |nf4 - bf16| = {mean_abs:.3f} nats")
    assert 0.01 < mean_abs < 1.5 and max(abs(d) for d in diffs) < 3.0
    assert nf4.loglikelihood(reqs, batch_size=1) == q  # NF4 is batch-invariant too
    text = nf4.generate([GenRequest(_chat(smollm2, "What is the capital of France?"), 12)])[0]
    assert "Paris" in text


def test_inspect_provider_greedy_seeds_and_logliks(smollm2):
    import anyio
    from inspect_ai.model import ChatMessageUser, GenerateConfig, get_model

    from safetyrepro.adapters.plugins import plugin_inspect  # noqa: F401  (registers the provider)

    model = get_model("safetyrepro/smollm2", device="cpu", memoize=False)
    assert model.api.engine is smollm2  # loaded once per process
    msgs = [ChatMessageUser(content="Write a haiku about cats.")]
    got = {}

    async def main():
        got["greedy"] = (await model.generate(msgs, config=GenerateConfig(temperature=0, max_tokens=16))).completion
        cfg = GenerateConfig(temperature=0.9, top_p=0.95, seed=3, max_tokens=16)
        got["s3"] = [(await model.generate(msgs, config=cfg)).completion for _ in range(2)]
        got["s4"] = (await model.generate(msgs, config=cfg.merge(GenerateConfig(seed=4)))).completion
        got["ll"] = await model.api.loglikelihood(msgs, ["In", "Cats", "zebra zebra"])

    anyio.run(main)
    model.api.close()
    prompt = _chat(smollm2, "Write a haiku about cats.")
    assert got["greedy"] == smollm2.generate([GenRequest(prompt, 16)])[0]
    assert got["s3"][0] == got["s3"][1] != got["s4"]
    assert got["s3"][0] == smollm2.generate([GenRequest(prompt, 16, temperature=0.9, top_p=0.95, seed=3)])[0]
    want = [ll for ll, _ in smollm2.loglikelihood([LoglikRequest(prompt, c) for c in ["In", "Cats", "zebra zebra"]])]
    assert got["ll"] == want and want[2] < want[0]


@pytest.mark.parametrize(
    "args, needle",
    [
        ("model=nope", "unknown model 'nope'"),
        ("model=smollm2,precision=int3", "unknown precision 'int3'"),
        ("model=/nonexistent/w.gguf", "GGUF file not found"),
    ],
)
def test_lm_eval_cli_bad_model_args_are_one_line(args, needle, mc_task_dir):
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "safetyrepro",
            "--model_args",
            args,
            "--tasks",
            "sr_tiny_mc",
            "--include_path",
            str(mc_task_dir),
            "--limit",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert p.returncode == 2, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("safetyrepro: error:") and needle in last and "Traceback" not in p.stderr


def test_lm_eval_rolling_loglik_equals_the_empty_context_score(smollm2):
    from types import SimpleNamespace

    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    lm = SafetyReproLM.from_engine(smollm2)
    text = "The quick brown fox jumps over the lazy dog. It was a sunny day."
    (rolling,) = lm.loglikelihood_rolling([SimpleNamespace(args=(text,))], disable_tqdm=True)
    ((scored, _),) = smollm2.loglikelihood([LoglikRequest("", text)])
    assert rolling == scored and -120 < rolling < -20


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_decoding_sized_to_the_work_gives_each_request_its_own_text(precision):
    """The default decode batch (every request side by side, sized to the work) gives, to the token,
    what batch sizes 1 and 3 give: greedy and seeded texts are the request's own, in float32 too
    (row blocks padded) and in bf16; greedy texts are transformers' `generate` on the prompt alone."""
    import torch

    from safetyrepro.adapters.engine.engine import load_engine

    eng = load_engine("smollm2", precision, "cpu")
    prompts = [_chat(eng, q) for q in QUESTIONS] + [_chat(eng, q + " Answer briefly.") for q in QUESTIONS[:5]]
    reqs = [GenRequest(p, 24) for p in prompts]
    reqs += [GenRequest(p, 24, temperature=0.7, top_p=0.9, seed=s) for p in prompts[:4] for s in (1, 2, 3)]
    reqs += [GenRequest(prompts[5], 30, temperature=1.0, top_p=1.0, seed=9)]
    auto = eng.generate_detailed(reqs)
    assert eng.batch_size is None  # nothing asked for: the engine sizes decoding to the work
    for bs in (1, 3):
        assert [r.text for r in eng.generate_detailed(reqs, batch_size=bs)] == [r.text for r in auto], bs
    assert len({r.text for r in auto[len(prompts) :]}) > 8  # seeds make different texts
    for i in (0, 3, 9):  # greedy: transformers' generate on the prompt alone
        ids = torch.tensor([eng.tok_encode(reqs[i].prompt)])
        with torch.inference_mode():
            out = eng.model.generate(ids, do_sample=False, max_new_tokens=24)
        assert eng.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True) == auto[i].text, i
