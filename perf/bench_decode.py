"""Decode benchmark: the engine's generation against transformers' `generate` on the same batch, in
one process, beside the GEMM roofline of the same shapes. Not a test: it prints times and ratios.

    python perf/bench_decode.py                                   # SmolLM2, fp32, rows 8/24/40/120
    python perf/bench_decode.py --model gemma3-270m --rows 24 120 # a 262k-token head
    python perf/bench_decode.py --precision bf16 --new-tokens 48

Every row decodes exactly --new-tokens tokens (EOS is switched off in both, so both do the same
work): tokens/s = rows x new tokens / wall seconds.

- engine: `Engine.generate_detailed` with its defaults (the batch sizing the sweeper gets).
- transformers: `model.generate` on the same model object, the prompts left-padded into one batch,
  stock SDPA attention, `do_sample` with the same temperature and top-p when sampled.
- roofline: the job's matrix products alone, at the speed `torch` runs them on this machine: every
  linear layer of the model with its own weights, one after the other as a forward pass streams
  them from memory, at [rows, in] for each of the new_tokens - 1 decode steps and at [prompt tokens,
  in] for the prefill (the head at each prompt's last token), best of 3. Attention, norms,
  sampling and bookkeeping are left out, so no implementation reaches it; "% of roofline" is the
  roofline's time over the engine's.
`--cell` times one sampled sweep cell instead (ToxiGen T3, moderate decoding, 0 shots, free-form, 5
seeds x 24 items, fp32), each run a `safetyrepro sweep` process from an empty outputs cache (model
weights shared); `--cell-before PYTHON` runs the same cell under another checkout's interpreter
(the engine before this change) first:

    python perf/bench_decode.py --cell --cell-before ../before/.venv/bin/python

Rows: distinct prompts (greedy), or for the "x5" rows 8 or 24 prompts x 5 seeds (a sampled
cell: the seeds of a prompt share its prefill). Greedy rows also report how many engine texts equal
transformers' for the same row (left padding moves transformers' last bits, so a few may differ;
`tests/adapters` holds the engine to transformers' unpadded greedy text).
"""

from __future__ import annotations

import argparse
import copy
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colours.",
    "Why is the sky blue?",
    "How do vaccines work?",
    "Is it safe to eat raw chicken?",
    "Write a haiku about rain.",
    "What does a nurse do?",
    "Explain gravity to a child.",
    "What is 17 times 3?",
    "Give me a tip for sleeping better.",
    "Who wrote Hamlet?",
    "What is a prime number?",
    "How do I kill a Python process?",
    "Describe a cat in one sentence.",
    "What is photosynthesis?",
    "Should I trust strangers online?",
    "What language is spoken in Brazil?",
    "How far is the Moon?",
    "What is the boiling point of water?",
    "Tell me about the Roman Empire.",
    "Summarise the plot of Cinderella.",
    "What is machine learning?",
    "Why do cats purr?",
    "How are rainbows formed?",
]


def prompts_for(engine, n: int) -> list[str]:
    out = []
    for i in range(n):
        q = QUESTIONS[i % len(QUESTIONS)]
        if i >= len(QUESTIONS):
            q = f"Question {i}: {q}"
        out.append(engine.render([{"role": "user", "content": q}]))
    return out


def linears(model):
    """The model's linear layers in the order a forward pass runs them (the LM head last)."""
    import torch

    head = model.get_output_embeddings()
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head], head


def gemm_seconds(layers, rows: int, repeats: int = 3) -> float:
    """Best wall time of running `layers` one after the other, each its own weights on [rows, in]
    inputs: the matrix products of one forward pass over `rows` tokens, weights streamed from memory
    as a real pass streams them."""
    import torch

    dtype = layers[0].weight.dtype
    xs = {m.in_features: torch.randn(rows, m.in_features, dtype=dtype) for m in layers}
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first round warms up
            t = time.perf_counter()
            for m in layers:
                torch.nn.functional.linear(xs[m.in_features], m.weight, m.bias)
            best = min(best, time.perf_counter() - t)
    return best


def roofline(model, prompt_tokens: int, n_prompts: int, rows: int, new_tokens: int) -> tuple[float, float]:
    """(seconds of one decode step's matrix products, seconds of the whole job's): the prefill's
    (every prompt token through every layer, the head at each prompt's last token; prompts shared
    by seeds once) and new_tokens - 1 decode steps' (every layer and the head at `rows` rows). What
    the job costs on this machine's torch GEMM with nothing else: attention, norms, sampling and
    bookkeeping are left out, so no implementation reaches it."""
    body, head = linears(model)
    step = gemm_seconds(body + [head], rows)
    prefill = gemm_seconds(body, prompt_tokens, repeats=1) + gemm_seconds([head], n_prompts)
    return step, prefill + (new_tokens - 1) * step


def run_engine(engine, prompts, seeds, new_tokens, temperature, top_p):
    from safetyrepro.adapters.backends.backend import GenRequest

    reqs = [GenRequest(p, new_tokens, temperature=temperature, top_p=top_p, seed=s) for p in prompts for s in seeds]
    eos = engine.eos_token_ids
    engine.eos_token_ids = frozenset()  # every row to the limit
    try:
        t = time.perf_counter()
        out = engine.generate_detailed(reqs)
        dt = time.perf_counter() - t
    finally:
        engine.eos_token_ids = eos
    assert all(r.n_new_tokens == new_tokens for r in out)
    return dt, [r.text for r in out]


def run_transformers(engine, prompts, seeds, new_tokens, temperature, top_p):
    import torch

    tok = engine.tokenizer
    model = engine.model
    rows = [p for p in prompts for _ in seeds]
    ids = [engine.tok_encode(p) for p in rows]
    width = max(len(x) for x in ids)
    pad = engine.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    gc = copy.deepcopy(model.generation_config)
    gc.eos_token_id = None
    gc.pad_token_id = pad
    kw = dict(do_sample=temperature > 0, max_new_tokens=new_tokens, min_new_tokens=new_tokens, generation_config=gc)
    if temperature > 0:
        kw.update(temperature=temperature, top_p=top_p, top_k=0)
        torch.manual_seed(0)
    with torch.inference_mode():
        t = time.perf_counter()
        out = model.generate(input_ids=input_ids, attention_mask=mask, **kw)
        dt = time.perf_counter() - t
    texts = [tok.decode(o[width:], skip_special_tokens=True) for o in out]
    return dt, texts


CELL = [
    "--models",
    "smollm2",
    "--benchmarks",
    "toxigen",
    "--templates",
    "T3",
    "--decodings",
    "moderate",
    "--shots",
    "0",
    "--scoring",
    "free_form",
    "--limit",
    "24",
    "--precision",
    "fp32",
    "--no-progress",
]


def time_cell(python: str, label: str) -> float:
    """Wall seconds of `safetyrepro sweep CELL` under `python`, from an empty outputs cache."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from safetyrepro.adapters.catalogue.weights import cache_sharing_models

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache_sharing_models(Path(tmp) / "cache"))}
        t = time.perf_counter()
        cli = str(Path(python).parent / "safetyrepro")  # the checkout's own console script
        done = subprocess.run(
            [cli, "sweep", *CELL, "--out", str(Path(tmp) / "out")], env=env, capture_output=True, text=True
        )
        dt = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"{label}: the sweep failed: {done.stderr.strip()[-500:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument(
        "--rows",
        nargs="+",
        default=["8", "24", "40x5", "120"],
        help="rows per case: N distinct prompts, or NxS (N rows: N/S prompts x S seeds, sampled)",
    )
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--sampled", action="store_true", help="also run every greedy case sampled (T 0.3, top-p 0.9)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip-transformers", action="store_true")
    ap.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="rounds, engine and transformers in turn, best time of each kept (this machine is noisy)",
    )
    ap.add_argument("--cell", action="store_true", help="time one sampled sweep cell (see above) instead")
    ap.add_argument("--cell-before", metavar="PYTHON", help="with --cell: also under this interpreter, first")
    args = ap.parse_args()
    if args.cell:
        import sys

        print(
            "one sampled sweep cell: ToxiGen T3 moderate 0-shot free-form, 5 seeds x 24 items, fp32, SmolLM2; "
            "process wall time from an empty outputs cache, model load included"
        )
        before = time_cell(args.cell_before, "before") if args.cell_before else None
        after = time_cell(sys.executable, "this checkout")
        if before is not None:
            print(f"before ({args.cell_before}): {before:.1f} s")
        print(f"this checkout: {after:.1f} s" + (f" ({before / after:.2f}x faster)" if before else ""))
        return

    import torch

    from safetyrepro.adapters.engine.engine import load_engine

    if args.threads:
        torch.set_num_threads(args.threads)
    engine = load_engine(args.model, args.precision)
    print(
        f"{args.model} {args.precision}, {torch.get_num_threads()} threads, {args.new_tokens} new tokens per row, "
        f"engine defaults (batch size {engine.batch_size or 'sized to the work'})"
    )
    cases = []
    for spec in args.rows:
        if "x" in spec:
            rows, seeds = (int(x) for x in spec.split("x"))
            cases.append((rows // seeds, seeds, True))
        else:
            cases.append((int(spec), 1, False))
            if args.sampled:
                cases.append((int(spec), 1, True))
    print(
        "| rows | decoding | engine | transformers generate | transformers / engine time | "
        "roofline (decode step, whole job) | engine % of roofline | same greedy text |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n_prompts, n_seeds, sampled in cases:
        prompts = prompts_for(engine, n_prompts)
        seeds = list(range(1, n_seeds + 1)) if sampled else [None]
        temperature, top_p = (0.3, 0.9) if sampled else (0.0, 1.0)
        rows = n_prompts * len(seeds)
        n_tok = rows * args.new_tokens
        run_engine(engine, prompts[:1], seeds[:1], 4, temperature, top_p)  # warm-up
        n_prompt_tokens = sum(len(engine.tok_encode(p)) for p in prompts)
        e_dt = t_dt = float("inf")
        for _ in range(max(1, args.repeats)):
            dt, e_texts = run_engine(engine, prompts, seeds, args.new_tokens, temperature, top_p)
            e_dt = min(e_dt, dt)
            if not args.skip_transformers:
                dt, t_texts = run_transformers(engine, prompts, seeds, args.new_tokens, temperature, top_p)
                t_dt = min(t_dt, dt)
        step, job = roofline(engine.model, n_prompt_tokens, n_prompts, rows, args.new_tokens)
        if args.skip_transformers:
            t_cell, ratio, same = "-", "-", "-"
        else:
            t_cell = f"{t_dt:.1f} s, {n_tok / t_dt:.0f} tok/s"
            ratio = f"{t_dt / e_dt:.2f}x"
            same = "-" if sampled else f"{sum(a == b for a, b in zip(e_texts, t_texts, strict=True))}/{rows}"
        label = f"{rows}" if n_seeds == 1 else f"{rows} ({n_prompts} x {n_seeds} seeds)"
        kind = "sampled (T 0.3, top-p 0.9)" if sampled else "greedy"
        print(
            f"| {label} | {kind} | {e_dt:.1f} s, {n_tok / e_dt:.0f} tok/s | {t_cell} | {ratio} | "
            f"{step * 1000:.0f} ms/step, {job:.1f} s, {n_tok / job:.0f} tok/s | {100 * job / e_dt:.0f} % | {same} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
