"""Micro-benchmark: continuation log-likelihood throughput of SafetyRepro's engine, against a
plain full-logits implementation and against lm-eval's HFLM, on the same requests and the same
loaded weights, in one process. Not a test: it prints times and ratios.

    python perf/bench_loglik.py                         # SmolLM2, bf16, 24 items x 4 choices
    python perf/bench_loglik.py --model gemma3-270m     # a 262k vocabulary, where slicing matters most
    python perf/bench_loglik.py --items 48 --context-words 300 --batch-size 8 --repeats 3

Requests look like multiple-choice scoring: a ~220-token context (deterministic pseudo-text)
and four short continuations per item.

- engine: `Engine.loglikelihood` (chunked prefill packed into one forward per pass, the four
  continuations of an item sharing their context's chunks, logits of the continuation positions
  only, float32 log-softmax there, identical inputs run once), from an empty prefix store each
  round;
- plain: right-padded batches of the same size, full logits at every position, float32
  log-softmax over the whole [batch, length, vocab] tensor, then a gather;
- hflm: `lm_eval.models.huggingface.HFLM(pretrained=<the same model object>)` with its defaults
  (log-softmax in the model dtype, its one-token-continuation cache) at the same batch size.
The baselines run with the model's stock SDPA attention; the implementations are timed in turn,
`--repeats` rounds, best time kept.
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = (
    "the a of to and in is was for on that with as by it at from this be are or an which not have his "
    "her they we you one all were there their been has when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now "
    "such like our over man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good very make "
    "world still own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take three"
).split()


def make_requests(n_items: int, context_words: int, seed: int = 0):
    from safetyrepro.adapters.engine.engine import LoglikRequest

    rng = random.Random(seed)
    reqs = []
    for i in range(n_items):
        body = " ".join(rng.choice(WORDS) for _ in range(context_words))
        ctx = f"Passage {i}: {body.capitalize()}.\nQuestion: Which word comes next?\nAnswer:"
        for _ in range(4):
            cont = " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
            reqs.append(LoglikRequest(ctx, cont))
    return reqs


def plain_full_logits(engine, pairs, batch_size: int) -> list[float]:
    """The straightforward implementation: full logits, full-vocabulary log-softmax everywhere."""
    import torch

    out = []
    pad = engine.pad_token_id
    with torch.inference_mode():
        for i in range(0, len(pairs), batch_size):
            chunk = pairs[i : i + batch_size]
            rows = [(c + k)[:-1] for c, k in chunk]
            width = max(len(r) for r in rows)
            ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
            logp = torch.log_softmax(engine.model(input_ids=ids).logits.float(), dim=-1)
            for b, ((_, k), r) in enumerate(zip(chunk, rows, strict=True)):
                pos = torch.arange(len(r) - len(k), len(r))
                out.append(logp[b, pos, torch.tensor(k)].sum().item())
    return out


def hflm_scores(hflm, reqs) -> list[float]:
    from lm_eval.api.instance import Instance

    inst = [
        Instance(request_type="loglikelihood", doc={}, arguments=(r.context, r.continuation), idx=i)
        for i, r in enumerate(reqs)
    ]
    return [ll for ll, _ in hflm.loglikelihood(inst, disable_tqdm=True)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32", "nf4"))
    ap.add_argument("--items", type=int, default=24, help="items; four continuations each")
    ap.add_argument("--context-words", type=int, default=200, help="words per context (~1.1 tokens each)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-hflm", action="store_true")
    ap.add_argument("--engine-bs1", action="store_true", help="also time the engine at batch size 1")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (default: torch's choice); 1 is steadier on a machine shared with other work",
    )
    args = ap.parse_args(argv)

    import torch

    from safetyrepro.adapters.engine.engine import load_engine

    if args.threads:
        torch.set_num_threads(args.threads)

    t = time.perf_counter()
    engine = load_engine(args.model, args.precision)
    print(
        f"model {engine.info.label} ({engine.info.name}), {args.precision}, {engine.info.device}, "
        f"vocab {engine.model.config.vocab_size}, loaded in {time.perf_counter() - t:.1f}s, "
        f"torch threads {torch.get_num_threads()}"
    )
    reqs = make_requests(args.items, args.context_words)
    pairs = [engine.encode_pair(r.context, r.continuation) for r in reqs]
    n_ctx = sum(len(c) for c, _ in pairs) / len(pairs)
    n_cont = sum(len(k) for _, k in pairs)
    print(
        f"{len(reqs)} requests ({args.items} items x 4), mean context {n_ctx:.0f} tokens, "
        f"{n_cont} continuation tokens, batch size {args.batch_size}, best of {args.repeats}"
    )

    runners = {"engine": lambda: [ll for ll, _ in engine.loglikelihood(reqs, batch_size=args.batch_size)]}
    if args.engine_bs1:
        runners["engine bs=1"] = lambda: [ll for ll, _ in engine.loglikelihood(reqs, batch_size=1)]
    runners["plain"] = lambda: plain_full_logits(engine, pairs, args.batch_size)
    if not args.skip_hflm:
        from lm_eval.models.huggingface import HFLM

        hflm = HFLM(
            pretrained=engine.model, tokenizer=engine.tokenizer, batch_size=args.batch_size, device=engine.info.device
        )
        runners["hflm"] = lambda: hflm_scores(hflm, reqs)
    attn = engine.model.config._attn_implementation

    def run(name):
        baseline = not name.startswith("engine")
        if baseline:
            engine.model.set_attn_implementation("sdpa")  # baselines on the model's stock attention
        else:
            engine.prefix_store.clear()  # no reuse across rounds: each round starts cold
        try:
            t, c = time.perf_counter(), time.process_time()
            out = runners[name]()
            return time.perf_counter() - t, time.process_time() - c, out
        finally:
            if baseline:
                engine.model.set_attn_implementation(attn)

    engine.loglikelihood(reqs[:8], batch_size=args.batch_size)  # warm-up
    results: dict[str, tuple[float, list[float]]] = {}
    cpu: dict[str, float] = {}
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits all alike
        for name in runners:
            secs, cpu_secs, out = run(name)
            if name not in results or secs < results[name][0]:
                results[name] = (secs, out)
            cpu[name] = min(cpu.get(name, float("inf")), cpu_secs)

    e_time, e_scores = results["engine"]
    print(f"load average during the run: {os.getloadavg()[0]:.1f} (2 cores here; other work skews absolute times)")
    print(
        f"\n{'implementation':14} {'wall s':>7} {'cpu s':>7} {'requests/s':>11} {'speed-up (wall)':>16} "
        f"{'speed-up (cpu)':>15} {'max |diff| vs engine':>21}"
    )
    for name, (secs, scores) in results.items():
        diff = max(abs(a - b) for a, b in zip(scores, e_scores, strict=True))
        print(
            f"{name:14} {secs:7.2f} {cpu[name]:7.2f} {len(reqs) / secs:11.1f} {secs / e_time:15.2f}x "
            f"{cpu[name] / cpu['engine']:14.2f}x {diff:21.4f}"
        )
    print("\nratios (other implementation / engine, same process, same requests; wall time, cpu time):")
    for name in ("plain", "hflm"):
        if name in results:
            print(f"  engine vs {name}: {results[name][0] / e_time:.2f}x wall, {cpu[name] / cpu['engine']:.2f}x cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
