"""Terminal output through rich, with one change: a closed pipe (`safetyrepro ... | head`) is an
ordinary BrokenPipeError, which the command line ends quietly with exit code 0 (rich's own
handler exits with 1). Also the wording of progress lines shared by the long commands (sweep, certify,
import): durations, and `paced`, a loop over many inputs that reports itself only once it is slow."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def console(**kwargs):
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(**kwargs)


def duration(seconds: float) -> str:
    """12 s, 4.5 min, 2.3 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def paced(
    items: Sequence[T],
    what: str,
    *,
    prefix: str,
    stream=None,
    every_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[T]:
    """Yield `items`, and each time `every_s` have passed since the last line (checked after each item) a
    line with how many are done, the time so far and the time left at the mean rate; a closing line if
    any was printed. A loop quicker than `every_s` prints nothing, so small imports stay quiet."""
    stream = stream or sys.stderr
    total = len(items)
    t0 = last = clock()
    spoke = False
    for i, item in enumerate(items, 1):
        yield item
        now = clock()
        if i < total and now - last >= every_s:
            left = (now - t0) / i * (total - i)
            print(
                f"{prefix}: {i:,} of {total:,} {what} in {duration(now - t0)}, about {duration(left)} left",
                file=stream,
                flush=True,
            )
            last, spoke = now, True
    if spoke:
        print(f"{prefix}: all {total:,} {what} in {duration(clock() - t0)}", file=stream, flush=True)
