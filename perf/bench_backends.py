"""The same sweep through three backends, side by side (a measurement, not a test):

    python perf/bench_backends.py                                   # toxigen, full envelope, --limit 50, SmolLM2
    python perf/bench_backends.py --benchmark xstest --limit 8 --only engine lm-eval-hf

(i) SafetyRepro's engine (`--models smollm2`), (ii) lm-eval's own HF backend in process
(`--models lm-eval:hf:pretrained=<the same weights exported as an HF folder>`), (iii) llama.cpp's
server on loopback serving the same GGUF (`lm-eval:local-completions`, logprob through prompt
log-probabilities). Each sweep runs the full envelope of one benchmark (48 configurations, sampled
ones with 5 seeds) through the same sweeper, from an empty outputs cache, one after the other in
this process's machine. Printed: wall time per backend, the ratio to the engine, and how the greedy
logprob choices of each backend compare with the engine's per item (with the bf16 HF backend, items
whose candidates tie exactly in its bf16 head are counted apart: the engine scores with a float32
head, docs/models.md).
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


def sweep(out: Path, model: str, args, cache: Path) -> float:
    cmd = [str(BIN / "safetyrepro"), "sweep", "--models", model, "--benchmarks", args.benchmark, "--tier", "full",
           "--limit", str(args.limit), "--no-progress", "--out", str(out)]
    env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache), "TQDM_DISABLE": "1"}
    t0 = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"sweep {model} failed:\n{res.stderr[-3000:]}")
    return time.time() - t0


def start_llamacpp(gguf: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smol",
                             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--logits_all", "true",
                             "--n_threads", str(os.cpu_count() or 2)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2)
            return proc, url
        except OSError:
            time.sleep(1)
    proc.kill()
    sys.exit("llama.cpp server did not start")


def choices(out: Path) -> pd.DataFrame:
    items = pd.read_parquet(out / "items.parquet")
    lp = items[items["config_id"].str.endswith("/logprob")]
    return lp.set_index(["config_id", "item_id"])[["prediction", "tied", "logliks"]]


def main() -> int:
    from safetyrepro.adapters.loading import materialised_folder
    from safetyrepro.adapters.weights import cache_sharing_models, resolve_weights

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmark", default="toxigen")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--model", default="smollm2", help="an embedded label")
    p.add_argument("--only", nargs="+", default=["engine", "lm-eval-hf", "llamacpp"])
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-backends-"))
    resolved = resolve_weights(args.model)
    folder = materialised_folder(resolved, "bf16")
    specs = {"engine": args.model, "lm-eval-hf": f"lm-eval:hf:pretrained={folder}"}
    server = None
    if "llamacpp" in args.only:
        server, url = start_llamacpp(resolved.path)
        specs["llamacpp"] = (f"lm-eval:local-completions:base_url={url}/completions,model=smol,tokenizer={folder},"
                             "tokenizer_backend=huggingface,num_concurrent=1,max_retries=2")
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
    report = {"benchmark": args.benchmark, "limit": args.limit, "model": args.model, "seconds": times}
    if base:
        for name, t in times.items():
            print(f"{name:<11} {t / base:6.2f}x the engine's time")
        ref = choices(outs["engine"])
        for name in times:
            if name == "engine":
                continue
            other = choices(outs[name]).reindex(ref.index)
            clear = ~other["tied"].astype(bool)
            same = ref["prediction"] == other["prediction"]
            print(f"{name:<11} greedy logprob choices equal to the engine's: {int(same.sum())}/{len(same)}; "
                  f"{int(same[clear].sum())}/{int(clear.sum())} where {name}'s own top candidates do not tie")
            report[f"{name}_same_choice"] = [int(same.sum()), len(same), int(same[clear].sum()), int(clear.sum())]
    print(json.dumps(report))
    print(f"runs under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
