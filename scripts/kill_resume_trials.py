"""Kill -9 a 3-model sweep at random moments, resume it, and check that the final grid is identical to
an uninterrupted run's, N times. Not a test (it takes minutes); it prints the count.

    python scripts/kill_resume_trials.py                          # 10 trials, 3 embedded models, 24 cells
    python scripts/kill_resume_trials.py --trials 3 --kills 2 --limit 2

A first uninterrupted run joins and dequantises the weights (once per machine) and must already equal
the timed reference run. Each trial sweeps into a fresh folder with a fresh outputs cache (so every kill
lands on real model work, model loading included), is killed with SIGKILL 1..--kills times after a random delay drawn
uniformly from the reference run's duration, then runs to the end; its grid.csv and items.parquet
must equal the reference's byte for byte.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b"]


def sweep_cmd(out: Path, models: list[str], limit: int, precision: str = "bf16") -> list[str]:
    return [
        sys.executable,
        "-m",
        "safetyrepro.cli",
        "sweep",
        "--models",
        *models,
        "--benchmarks",
        "toxigen",
        "xstest",
        "--tier",
        "conservative_core",
        "--limit",
        str(limit),
        "--precision",
        precision,
        "--no-progress",
        "--out",
        str(out),
    ]


def env_for(cache: Path) -> dict:
    from safetyrepro.adapters.catalogue.weights import cache_sharing_models

    return {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache_sharing_models(cache)), "TQDM_DISABLE": "1"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--kills", type=int, default=3, help="at most this many kills per trial (at least one)")
    p.add_argument("--limit", type=int, default=3, help="items per cell")
    p.add_argument("--models", nargs="+", default=MODELS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", default="bf16", help="fp32 is the faster one on CPUs without native bf16 (AVX2)")
    args = p.parse_args()
    rng = random.Random(args.seed)

    def cmd(out: Path) -> list[str]:
        return sweep_cmd(out, args.models, args.limit, args.precision)

    root = Path(tempfile.mkdtemp(prefix="kill-resume-"))
    # a first run joins and dequantises the weights once, so that the timed reference (and the kill delays
    # drawn from it) is a steady-state sweep; its grid must already equal the reference's
    warm = subprocess.run(cmd(root / "warm-up"), env=env_for(root / "cache-warm"), capture_output=True, text=True)
    t0 = time.time()
    ref = subprocess.run(cmd(root / "reference"), env=env_for(root / "cache-ref"), capture_output=True, text=True)
    duration = time.time() - t0
    if ref.returncode != 0 or warm.returncode != 0:
        sys.exit(f"the reference sweep failed:\n{(ref if ref.returncode else warm).stderr[-3000:]}")
    want = {f: (root / "reference" / f).read_bytes() for f in ("grid.csv", "items.parquet")}
    if any((root / "warm-up" / f).read_bytes() != b for f, b in want.items()):
        sys.exit("two uninterrupted runs gave different grids")
    n_cells = len(want["grid.csv"].splitlines()) - 1
    print(f"reference: {duration:.0f} s, {n_cells} cells", flush=True)
    identical = killed = 0
    for t in range(1, args.trials + 1):
        out, env = root / f"trial{t}", env_for(root / f"cache{t}")
        kills = []
        for _ in range(rng.randint(1, args.kills)):
            proc = subprocess.Popen(cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            delay = rng.uniform(1.0, duration * (0.8 if not kills else 1.0))  # the first kill lands in the run
            try:
                proc.wait(timeout=delay)
                break  # it finished before the kill
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills.append(round(delay, 1))
        final = subprocess.run(cmd(out), env=env, capture_output=True, text=True)
        same = final.returncode == 0 and all((out / f).read_bytes() == b for f, b in want.items())
        leftovers = list(out.rglob("*.tmp"))
        identical += same and not leftovers
        killed += bool(kills)
        print(
            f"trial {t}: killed at {kills} s, then finished: grid {'identical' if same else 'DIFFERENT'}"
            + (f", {len(leftovers)} .tmp files left" if leftovers else ""),
            flush=True,
        )
    print(
        f"identical to the uninterrupted run: {identical}/{args.trials}, killed at least once in {killed} "
        f"(folders under {root})"
    )
    return 0 if identical == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
