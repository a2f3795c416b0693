"""The same sweep through three backends, side by side (a measurement, not a test):

    python perf/bench_backends.py                                   # toxigen, full envelope, --limit 50, SmolLM2
    python perf/bench_backends.py --precision fp32 --limit 8        # what fits in under an hour on 2 cores
    python perf/bench_backends.py --tier logprob --only engine lm-eval-hf   # choices on 50 items per cell

(i) SafetyRepro's engine (`--models smollm2`), (ii) lm-eval's own HF backend in process
(`--models lm-eval:hf:pretrained=<the same weights exported as an HF folder>`), (iii) llama.cpp's
server on loopback serving the same GGUF (`lm-eval:local-completions`, logprob through prompt
log-probabilities). Each sweep runs the full envelope of one benchmark (48 configurations, sampled
ones with 5 seeds) through the same sweeper, from an empty outputs cache, one after the other in
this process's machine. Printed: wall time per backend (process start and model load included), the
ratio to the engine, how the greedy logprob choices of each backend compare with the engine's per item
(with the bf16 HF backend, items whose candidates tie exactly in its bf16 head are counted apart: the
engine scores with a float32 head, docs/models.md), and how often the parsed labels of greedy free-form
cells agree. llama.cpp serves the GGUF as it is stored; lm-eval's HF model gets the same weights in
--precision (dtype in its model args). A sweep with a failed cell stops the benchmark with that
cell's error; the server's log is kept beside the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd

BIN = Path(sys.executable).parent
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}


def sweep(out: Path, model: str, args, cache: Path) -> float:
    cmd = [
        str(BIN / "safetyrepro"),
        "sweep",
        "--models",
        model,
        "--benchmarks",
        args.benchmark,
        "--tier",
        args.tier,
        "--precision",
        args.precision,
        "--limit",
        str(args.limit),
        "--no-progress",
        "--out",
        str(out),
    ]
    env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache), "TQDM_DISABLE": "1"}
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"sweep {model} failed: {first_failure(out) or res.stderr[-3000:]}")
    return time.time() - t0


def first_failure(out: Path) -> str | None:
    from safetyrepro.sweep.store import Store

    failed = [r for r in Store(out).records() if r["status"] == "failed"]
    return f"{failed[0].get('config_id')}: {failed[0].get('error')}" if failed else None


def start_llamacpp(gguf: Path, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(gguf),
                "--model_alias",
                "smol",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "4096",
                "--logits_all",
                "true",
                "--n_threads",
                str(os.cpu_count() or 2),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2)
            return proc, url
        except OSError:
            time.sleep(1)
    proc.kill()
    sys.exit("llama.cpp server did not start")


def greedy_items(out: Path, scoring: str) -> pd.DataFrame:
    items = pd.read_parquet(out / "items.parquet")
    cells = items[items["config_id"].str.contains("/greedy/") & items["config_id"].str.endswith(f"/{scoring}")]
    return cells.set_index(["config_id", "item_id"])[["prediction", "parsed", "tied"]]


def compare_with_engine(name: str, engine: Path, other: Path) -> dict:
    found = {}
    ref, got = greedy_items(engine, "logprob"), greedy_items(other, "logprob")
    if len(ref) and len(got):
        got = got.reindex(ref.index)
        clear = ~got["tied"].fillna(False).astype(bool)
        same = ref["prediction"] == got["prediction"]
        print(
            f"{name:<11} greedy logprob choices equal to the engine's: {int(same.sum())}/{len(same)}; "
            f"{int(same[clear].sum())}/{int(clear.sum())} where {name}'s own top candidates do not tie"
        )
        found["same_choice"] = [int(same.sum()), len(same), int(same[clear].sum()), int(clear.sum())]
    elif len(ref):
        print(f"{name:<11} greedy logprob cells: not applicable (run.json says why)")
    ref, got = greedy_items(engine, "free_form"), greedy_items(other, "free_form")
    if len(ref) and len(got):
        got = got.reindex(ref.index)
        # a label the parser could not read is its own outcome, so "both unparsed" counts as agreeing
        same = (ref["prediction"] == got["prediction"]) & ref["parsed"].astype(bool) | ~ref["parsed"].astype(
            bool
        ) & ~got["parsed"].fillna(False).astype(bool)
        print(f"{name:<11} greedy free-form parsed labels equal to the engine's: {int(same.sum())}/{len(same)}")
        found["same_label"] = [int(same.sum()), len(same)]
    return found


def main() -> int:
    from safetyrepro.adapters.catalogue.loading import materialised_folder
    from safetyrepro.adapters.catalogue.weights import cache_sharing_models, resolve_weights

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmark", default="toxigen")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--model", default="smollm2", help="an embedded label")
    p.add_argument("--tier", default="full")
    p.add_argument(
        "--precision",
        choices=sorted(DTYPES),
        default="bf16",
        help="the engine's and lm-eval HF's precision (fp32 is faster on CPUs without bf16 units)",
    )
    p.add_argument(
        "--only", nargs="+", choices=["engine", "lm-eval-hf", "llamacpp"], default=["engine", "lm-eval-hf", "llamacpp"]
    )
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    resolved = resolve_weights(args.model)
    folder = materialised_folder(resolved, args.precision)
    specs = {"engine": args.model, "lm-eval-hf": f"lm-eval:hf:pretrained={folder},dtype={DTYPES[args.precision]}"}
    server = None
    if "llamacpp" in args.only:
        server, url = start_llamacpp(resolved.path, root / "llamacpp-server.log")
        # this server takes text prompts, not token ids (docs/sweeps.md, "A local server")
        specs["llamacpp"] = (
            f"lm-eval:local-completions:base_url={url}/completions,model=smol,tokenizer={folder},"
            "tokenizer_backend=huggingface,tokenized_requests=False,num_concurrent=1,max_retries=2"
        )
    times, outs = {}, {}
    try:
        for name in args.only:
            outs[name] = root / name
            times[name] = sweep(outs[name], specs[name], args, cache_sharing_models(root / f"cache-{name}"))
            print(f"{name:<11} {times[name]:8.1f} s", flush=True)
    finally:
        if server is not None:
            server.terminate()
    base = times.get("engine")
    report = {
        "benchmark": args.benchmark,
        "limit": args.limit,
        "tier": args.tier,
        "precision": args.precision,
        "model": args.model,
        "seconds": times,
    }
    if base:
        for name, t in times.items():
            print(f"{name:<11} {t / base:6.2f}x the engine's time")
        for name in times:
            if name != "engine":
                report[name] = compare_with_engine(name, outs["engine"], outs[name])
    print(json.dumps(report))
    print(f"runs under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
