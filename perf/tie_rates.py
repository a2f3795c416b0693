"""Tie rates of logprob scoring with the model-dtype LM head and with the float32 head, and their cost.

    python perf/tie_rates.py                                  # 3 embedded models, 5 benchmarks, T1-T4, 0-shot, 24 items
    python perf/tie_rates.py --models smollm2 --limit 50 --fp32-model

For every model x benchmark, the logprob items of the T1-T4 configurations (0-shot; --shots) are
scored by the same engine twice in one process: `exact_scores=False` (the head in the model dtype,
as transformers and lm-eval's HFLM compute it) and `exact_scores=True` (the head in float32 on the
upcast final hidden state, SafetyRepro's default). An item ties when its highest log-likelihood is
shared by several candidates. Printed per model x benchmark: items, tie rate before and after, the
agreement of the two heads' choices on items that do not tie under either, and the wall time of each
head over the same first --timed requests (prefill included; the prefix store is cleared before each
timed run; the full runs share the prefill, which does not depend on the head).
`--fp32-model` also loads the model in float32 and reports how often the bf16 model (float32 head)
chooses as the float32 model does. Not a timed test: a measurement, reported in docs/models.md.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SAFETYREPRO_OFFLINE", "1")


def requests_for(engine, benchmark: str, limit: int, shots_levels=(0,)):
    """(item key, gold-credit function, list of LoglikRequest) for every logprob configuration's items."""
    from safetyrepro.adapters.engine.engine import LoglikRequest
    from safetyrepro.tasks.benchmarks.registry import get_benchmark
    from safetyrepro.tasks.rendering import continuation
    from safetyrepro.tasks.subsets import item_set

    bench, s = get_benchmark(benchmark), item_set(benchmark)
    chat = engine.info.has_chat_template
    out = []
    for template in bench.templates:
        for shots in shots_levels:
            demos = s.demos_for(shots)
            for item in s.items[:limit]:
                context = engine.render(bench.prompt(item, template, demos).messages())
                reqs = [LoglikRequest(context, continuation(c, chat)) for c in bench.candidates(item, template)]
                out.append(((template, shots, item.id), item, reqs))
    return bench, out


def score(engine, flat, exact: bool, cold: bool = True):
    """Log-likelihoods with one head; `cold` empties the prefix store first (for timing)."""
    if cold:
        engine.prefix_store.clear()
    t0 = time.perf_counter()
    res = engine.loglikelihood(flat, exact=exact)
    return [ll for ll, _ in res], time.perf_counter() - t0


def main() -> None:
    from safetyrepro.adapters.engine.engine import load_engine
    from safetyrepro.tasks.benchmark import tied_winners

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b"])
    p.add_argument("--benchmarks", nargs="+", default=["truthfulqa", "bbq", "crows_pairs", "toxigen", "xstest"])
    p.add_argument("--limit", type=int, default=24)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--fp32-model", action="store_true", help="also compare choices with the float32 model")
    p.add_argument("--shots", type=int, nargs="+", default=[0], help="few-shot levels (default 0)")
    p.add_argument("--timed", type=int, default=48, help="requests timed with each head from a cold prefix store")
    args = p.parse_args()

    print(
        f"{'model':<20} {'benchmark':<12} {'items':>5} {'ties model-head':>16} {'ties fp32-head':>15} "
        f"{'same choice':>12} {'t model-head':>13} {'t fp32-head':>12}"
        + ("  same as fp32 model" if args.fp32_model else "")
    )
    totals = {}
    for model in args.models:
        engine = load_engine(model, args.precision, "cpu")
        ref = load_engine(model, "fp32", "cpu") if args.fp32_model else None
        for benchmark in args.benchmarks:
            bench, rows = requests_for(engine, benchmark, args.limit, tuple(args.shots))
            flat = [r for _, _, reqs in rows for r in reqs]
            score(engine, flat[:8], True)  # warm-up (and the float32 head made once)
            timed = flat[: args.timed]  # cost: the same requests from a cold store, each head
            t_before = score(engine, timed, False)[1]
            t_after = score(engine, timed, True)[1]
            after = score(engine, flat, True)[0]
            before = score(engine, flat, False, cold=False)[0]  # the contexts' chunks come from the store
            ref_ll = score(ref, flat, True)[0] if ref is not None else None
            n = ties_b = ties_a = same = both_clear = same_ref = 0
            i = 0
            for _, _item, reqs in rows:
                k = len(reqs)
                b, a = before[i : i + k], after[i : i + k]
                wb, wa = tied_winners(b), tied_winners(a)
                n += 1
                ties_b += len(wb) > 1
                ties_a += len(wa) > 1
                if len(wb) == 1 and len(wa) == 1:
                    both_clear += 1
                    same += wb[0] == wa[0]
                if ref_ll is not None:
                    same_ref += bench.pick(a) == bench.pick(ref_ll[i : i + k])
                i += k
            t = totals.setdefault(model, [0, 0, 0])
            t[0] += n
            t[1] += ties_b
            t[2] += ties_a
            line = (
                f"{model:<20} {benchmark:<12} {n:>5} {ties_b / n:>16.2%} {ties_a / n:>15.2%} "
                f"{same / max(both_clear, 1):>12.1%} {t_before:>12.1f}s {t_after:>11.1f}s"
            )
            if ref_ll is not None:
                line += f"  {same_ref / n:.1%}"
            print(line, flush=True)
    for model, (n, b, a) in totals.items():
        print(f"{model:<20} {'all':<12} {n:>5} {b / n:>16.2%} {a / n:>15.2%}")


if __name__ == "__main__":
    main()
