"""Performance of the sweeper, measured side by side in one process. Not a test: it prints times and
ratios (docs/performance.md records a run). Every measurement starts from an empty output cache.

    python perf/bench_sweep.py                      # all four, SmolLM2, toxigen, --limit 8
    python perf/bench_sweep.py --only a --limit 4   # (a) only
    python perf/bench_sweep.py --only bcd

(a) the full envelope of one benchmark (48 configurations; sampled ones with 5 seeds) through
    `safetyrepro sweep` against a loop of `lm_eval` CLI calls, one per configuration and seed, on
    the same engine (`--model safetyrepro`), comparing wall time and the scores (must be identical);
(b) a 5-shot cell against the same cell at 0 shots (target <= 1.5x);
(c) a 5-seed sampled cell against one seed (target <= 2x);
(d) logprob scoring throughput (tokens/s) against one batched forward pass over the same tokens
    (target >= 50 %).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")

BIN = Path(sys.executable).parent


def _env(cache: Path) -> dict:
    return {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache)}


def _shared_model_cache(cache: Path) -> None:
    """Reuse joined model weights (not outputs) from the user's cache: we time inference, not joining."""
    from safetyrepro.tasks.sources import cache_dir

    src = cache_dir() / "models"
    if src.exists() and not (cache / "models").exists():
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "models").symlink_to(src)


def bench_a(model: str, benchmark: str, limit: int, tmp: Path) -> None:
    import pandas as pd

    from safetyrepro.tasks.envelope import default_rules
    from safetyrepro.tasks.lm_eval_tasks import task_name

    rules = default_rules()
    configs = rules.configs(benchmark)
    cache = tmp / "a-sweep-cache"
    _shared_model_cache(cache)
    t0 = time.time()
    res = subprocess.run(
        [
            str(BIN / "safetyrepro"),
            "sweep",
            "--models",
            model,
            "--benchmarks",
            benchmark,
            "--limit",
            str(limit),
            "--no-progress",
            "--out",
            str(tmp / "a-sweep"),
        ],
        env=_env(cache),
        capture_output=True,
        text=True,
    )
    t_sweep = time.time() - t0
    if res.returncode:
        sys.exit(f"sweep failed: {res.stderr[-2000:]}")
    grid = pd.read_csv(tmp / "a-sweep" / "grid.csv").set_index("config_id")
    print(f"(a) sweeper: {len(grid)} cells in {t_sweep:.1f} s", flush=True)

    cache = tmp / "a-loop-cache"
    _shared_model_cache(cache)
    t0 = time.time()
    loop_scores, calls = {}, 0
    for cfg in configs:
        dec = rules.decodings[cfg.decoding]
        seed_scores = []
        for seed in rules.seeds(cfg.decoding):
            out = tmp / "a-loop" / cfg.config_id.replace("/", "__") / str(seed)
            cmd = [
                str(BIN / "lm_eval"),
                "--model",
                "safetyrepro",
                "--model_args",
                f"model={model}",
                "--tasks",
                task_name(cfg.benchmark, cfg.template, cfg.scoring),
                "--num_fewshot",
                str(cfg.shots),
                "--limit",
                str(limit),
                "--apply_chat_template",
                "--output_path",
                str(out),
                "--seed",
                str(seed),
            ]
            if cfg.scoring == "free_form":
                gk = f"temperature={dec.temperature},top_p={dec.top_p},do_sample={dec.do_sample}"
                cmd += ["--gen_kwargs", gk + (f",seed={seed}" if dec.do_sample else "")]
            r = subprocess.run(cmd, env=_env(cache), capture_output=True, text=True, cwd=tmp)
            calls += 1
            if r.returncode:
                sys.exit(f"lm_eval failed on {cfg.config_id}: {r.stderr[-2000:]}")
            result = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
            seed_scores.append(next(iter(result.values()))["acc,none"])
        loop_scores[cfg.config_id] = sum(seed_scores) / len(seed_scores)
        print(f"    lm_eval loop: {cfg.config_id} done ({calls} calls, {time.time() - t0:.0f} s)", flush=True)
    t_loop = time.time() - t0
    same = all(abs(grid.loc[c, "score"] - s) < 1e-12 for c, s in loop_scores.items())
    print(f"(a) lm_eval CLI loop: {calls} calls in {t_loop:.1f} s")
    print(
        f"(a) RESULT sweeper {t_sweep:.1f} s vs lm_eval loop {t_loop:.1f} s: {t_loop / t_sweep:.1f}x faster "
        f"(target >= 5x); scores identical: {same}"
    )


def _time_cell(driver, cfg, seeds, ids) -> float:
    t0 = time.time()
    driver.run_cell(cfg, seeds, ids)
    return time.time() - t0


def bench_bcd(model: str, benchmark: str, limit: int, tmp: Path) -> None:
    from safetyrepro.adapters.catalogue.model_specs import parse_model_spec
    from safetyrepro.sweep.cell import CellSetup, open_model
    from safetyrepro.sweep.outputs_cache import OutputsCache
    from safetyrepro.sweep.plan import SweepSpec
    from safetyrepro.tasks.envelope import Config, default_rules

    rules = default_rules()
    os.environ["SAFETYREPRO_CACHE_DIR"] = str(tmp / "bcd-cache")
    _shared_model_cache(tmp / "bcd-cache")
    entry = parse_model_spec(model)
    spec = SweepSpec((entry.label,), (benchmark,), "full", "lm-eval", "bf16", None, rules.sha256)
    setup = CellSetup(spec, rules)
    driver = open_model(entry, setup).driver
    engine = driver.backend
    ids = [it.id for it in setup.items_for(benchmark).items[:limit]]

    def fresh(name: str) -> None:  # an empty output cache and an empty prefix KV store for each timed run
        engine.cache = OutputsCache(tmp / f"bcd-{name}.sqlite")
        engine.inner.prefix_store.clear()  # else a timed cell would reuse the prompts the cell before it prefilled

    fresh("warm")
    driver.run_cell(Config(benchmark, "T3", "greedy", 0, "free_form"), (0,), ids[:2])  # warm-up
    for scoring in ("free_form", "logprob"):
        fresh(f"b0-{scoring}")
        t0 = _time_cell(driver, Config(benchmark, "T3", "greedy", 0, scoring), (0,), ids)
        fresh(f"b5-{scoring}")
        t5 = _time_cell(driver, Config(benchmark, "T3", "greedy", 5, scoring), (0,), ids)
        print(
            f"(b) RESULT {scoring}: 5-shot {t5:.2f} s vs 0-shot {t0:.2f} s = {t5 / t0:.2f}x (target <= 1.5x)",
            flush=True,
        )

    cfg = Config(benchmark, "T3", "moderate", 0, "free_form")
    seeds = rules.seeds("moderate")
    fresh("c1")
    engine.prefetch_seeds = ()
    t1 = _time_cell(driver, cfg, seeds[:1], ids)
    fresh("c5")
    engine.prefetch_seeds = tuple(seeds)
    t5 = _time_cell(driver, cfg, seeds, ids)
    print(f"(c) RESULT 5 seeds {t5:.2f} s vs 1 seed {t1:.2f} s = {t5 / t1:.2f}x (target <= 2x)", flush=True)
    # the rows one seed decodes side by side: the batch size asked for, else (sized to the work) every item
    decode_floor(engine.inner, engine.inner.batch_size or len(ids), len(seeds))

    bench_d(engine.inner, benchmark, limit, ids)


def decode_floor(engine, rows: int, seeds: int, context: int = 300, steps: int = 20) -> None:
    """What (c) cannot beat: one decoding step of the model's stock forward for `seeds` x `rows` rows
    against `rows` rows, same context length (5 seeds decode 5 distinct continuations)."""
    import torch

    per_step = {}
    with torch.inference_mode():
        for n in (rows, seeds * rows):
            ids = torch.randint(100, 10_000, (n, context), device=engine.model.device)
            cache = engine.model(ids, use_cache=True).past_key_values
            tok = ids[:, -1:]
            t0 = time.perf_counter()
            for _ in range(steps):
                cache = engine.model(tok, past_key_values=cache, use_cache=True).past_key_values
            per_step[n] = (time.perf_counter() - t0) / steps
    a, b = per_step[rows], per_step[seeds * rows]
    print(
        f"(c) floor: one decoding step for {seeds * rows} rows {1000 * b:.0f} ms vs {rows} rows {1000 * a:.0f} ms "
        f"= {b / a:.2f}x (the model's own forward; the prefill is what the 5 seeds share)",
        flush=True,
    )


def bench_d(engine, benchmark: str, limit: int, ids) -> None:
    """Scoring throughput against the floor: one batched forward over exactly the same tokens."""
    import torch

    from safetyrepro.adapters.engine.engine import DEFAULT_BATCH_SIZE, LoglikRequest
    from safetyrepro.tasks.benchmarks.registry import get_benchmark
    from safetyrepro.tasks.rendering import continuation
    from safetyrepro.tasks.subsets import item_set

    bench, s = get_benchmark(benchmark), item_set(benchmark)
    chat = engine.info.has_chat_template
    reqs = []
    for it in s.items[:limit]:
        ctx = engine.render(bench.prompt(it, "T3", s.demos_for(3)).messages())
        reqs += [LoglikRequest(ctx, continuation(c, chat)) for c in bench.candidates(it, "T3")]
    pairs = [engine.encode_pair(r.context, r.continuation) for r in reqs]
    n_tokens = sum(len(c) + len(k) for c, k in pairs)
    engine.loglikelihood(reqs[:4])  # warm-up
    engine.prefix_store.clear()  # cold: what it reuses, it finds within these requests
    t0 = time.time()
    engine.loglikelihood(reqs)
    t_engine = time.time() - t0
    # the floor: the distinct full sequences, right-padded, one forward each batch, logits discarded
    rows = [c + k for c, k in pairs]
    bs = engine.batch_size or DEFAULT_BATCH_SIZE  # the engine's log-likelihood batches when none is asked for
    t0 = time.time()
    with torch.inference_mode():
        for i in range(0, len(rows), bs):
            batch = rows[i : i + bs]
            width = max(map(len, batch))
            ids_t = torch.tensor([r + [0] * (width - len(r)) for r in batch])
            mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in batch])
            engine.model(
                input_ids=ids_t.to(engine.model.device), attention_mask=mask.to(engine.model.device), logits_to_keep=1
            )
    t_floor = time.time() - t0
    print(
        f"(d) RESULT logprob scoring {n_tokens / t_engine:.0f} tok/s vs batched forward {n_tokens / t_floor:.0f} "
        f"tok/s = {100 * t_floor / t_engine:.0f} % (target >= 50 %); {len(reqs)} requests, {n_tokens} tokens"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--benchmark", default="toxigen")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--only", default="abcd", help="which measurements: any of a, b, c, d (b, c, d run together)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="safetyrepro-bench-") as d:
        tmp = Path(d)
        if "a" in args.only:
            bench_a(args.model, args.benchmark, args.limit, tmp)
        if set("bcd") & set(args.only):
            bench_bcd(args.model, args.benchmark, args.limit, tmp)


if __name__ == "__main__":
    main()
