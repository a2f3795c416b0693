"""Terminal output through rich, with one change: a closed pipe (`safetyrepro ... | head`) is an
ordinary BrokenPipeError, which the command line ends quietly with exit code 0 (rich's own
handler exits with 1). Also the progress lines shared by the long commands (sweep, certify, import, plan):
`duration`, the one way a time is written; `Heartbeat`, the one pace of progress lines (a line once some
seconds have passed since the last one, from a loop's steps or, while one long call runs, from a thread);
and `paced`, a loop over many inputs that reports itself only once it is slow."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
HEARTBEAT_S = 30.0  # a long call says it is alive at least this often (sweep cells, certify calls and loads)


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


class Heartbeat:
    """A progress line each time `every_s` seconds have passed since the last one: `line(elapsed)` (seconds
    since the start; None: nothing to say now) goes to `say`. `beat()` checks after each step of a loop;
    started (or as a context manager) a thread checks every second (or every_s, if shorter) while one long call runs.
    `said()` tells it another line was printed, so the next beat waits a whole interval from there."""

    def __init__(
        self,
        line: Callable[[float], str | None],
        say: Callable[[str], None],
        every_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.line, self.say, self.every_s, self.clock = line, say, every_s, clock
        self.t0 = self.last = clock()
        self.spoke = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def said(self) -> None:
        self.last = self.clock()

    def beat(self) -> None:
        now = self.clock()
        if now - self.last < self.every_s:
            return
        text = self.line(now - self.t0)
        if text is not None:
            self.say(text)
            self.last, self.spoke = now, True

    def start(self) -> Heartbeat:
        """Beat from a thread until `stop()`."""
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
    done = 0

    def line(elapsed: float) -> str | None:
        if done == total:  # the closing line says it
            return None
        left = elapsed / done * (total - done)
        return f"{prefix}: {done:,} of {total:,} {what} in {duration(elapsed)}, about {duration(left)} left"

    heartbeat = Heartbeat(line, lambda text: print(text, file=stream, flush=True), every_s, clock)
    for item in items:
        yield item
        done += 1
        heartbeat.beat()
    if heartbeat.spoke:
        print(f"{prefix}: all {total:,} {what} in {duration(clock() - heartbeat.t0)}", file=stream, flush=True)
