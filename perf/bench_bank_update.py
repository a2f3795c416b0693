"""Micro-benchmark: one draw into a bank of betting confidence sequences (IidBettingCS.update), the step every
certify round and every `plan --certify` simulation repeats, with the streams given as every row in order (read
and written as a slice, in place) against the same rows as an index array (gathered into copies and scattered
back: the path before, and still the path when a round feeds some rows only), in one process, beside the
memory roofline. Not a test: it prints times and ratios.

    python perf/bench_bank_update.py                       # 400 and 1,600 streams x 203 candidates, both stakes
    python perf/bench_bank_update.py --streams 48 --repeats 9

- in order: `update(np.arange(n), values)`, what a bank that every stream feeds at once is given;
- index array: the same rows in reverse order (the values reversed with them), so the update takes numpy's
  fancy-indexing path; the results are identical (checked);
- roofline: the bytes an update must move, the four (streams x candidates) float64 capital arrays read and
  written once (64 bytes a cell), over this machine's copy bandwidth (np.copyto of a 256 MiB array): no update
  can be faster. The two log1p a cell are arithmetic on top; "% of roofline" is the roofline's time over the
  update's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from safetyrepro.sequential.confidence_sequence import IidBettingCS


def copy_bandwidth(mib: int = 256, repeats: int = 5) -> float:
    """Bytes a second that np.copyto moves (read + write) on this machine, best of `repeats`."""
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best


def time_updates(streams: int, stakes: str, order: np.ndarray, draws: np.ndarray, repeats: int):
    """Best seconds per update over `repeats` rounds of len(draws) updates from a fresh bank, and the last bank."""
    best, cs = np.inf, None
    for _ in range(repeats):
        cs = IidBettingCS(streams, 0.001, 0.0, 1.0, grid_points=201, extra=(0.25, 0.75), stakes=stakes)
        t0 = time.perf_counter()
        for d in draws:
            cs.update(order, d[order])
        best = min(best, (time.perf_counter() - t0) / len(draws))
    return best, cs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[400, 1600])
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth: {bandwidth / 1e9:.1f} GB/s (np.copyto, read + write)")
    header = f"{'streams':>7} {'stakes':<7} {'in order':>10} {'index array':>12} {'ratio':>6} {'roofline':>10}"
    print(f"{header} {'% roof':>7}")
    rng = np.random.default_rng(0)
    for n in a.streams:
        draws = (rng.random((a.draws, n)) < 0.6).astype(float)
        for stakes in ("growth", "width"):
            fast, x = time_updates(n, stakes, np.arange(n), draws, a.repeats)
            slow, y = time_updates(n, stakes, np.arange(n)[::-1].copy(), draws, a.repeats)
            assert np.array_equal(x.max_plus, y.max_plus) and np.array_equal(x.log_minus, y.log_minus)
            roof = 64 * x.log_plus.size / bandwidth
            print(
                f"{n:>7} {stakes:<7} {fast * 1e3:>8.2f}ms {slow * 1e3:>10.2f}ms {slow / fast:>6.2f} "
                f"{roof * 1e3:>8.3f}ms {100 * roof / fast:>6.1f}%"
            )


if __name__ == "__main__":
    main()
