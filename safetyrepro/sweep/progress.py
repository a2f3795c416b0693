"""Progress of a sweep that people can follow in a terminal and in a log.

In a terminal: a live bar (cells done / total, items per second, elapsed, ETA, the current cell). In a log
(stderr not a terminal, or --no-progress): a line when a cell starts, a line when it ends with its
seconds and the time left (the mean of this sweep's cells so far times the cells left), and inside a
long cell a line at least every HEARTBEAT_S seconds (console.Heartbeat), so a log never goes quiet for
minutes."""

from __future__ import annotations

import sys
import threading
import time

from safetyrepro.console import HEARTBEAT_S, Heartbeat, duration

__all__ = ["HEARTBEAT_S", "SweepProgress", "duration"]


class SweepProgress:
    def __init__(self, enabled: bool = True, heartbeat_s: float = HEARTBEAT_S, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.heartbeat_s = heartbeat_s
        self.items = 0
        self.failed = 0
        self._t0 = time.time()
        self._cell: str | None = None
        self._cell_t0 = 0.0
        self._seconds: list[float] = []  # cells that ran (not skipped ones)
        self._lock = threading.Lock()
        self._beat: Heartbeat | None = None

    def _say(self, text: str) -> None:
        with self._lock:
            print(f"[{self.done}/{self.total}] {text}", file=self.stream, flush=True)
            if self._beat is not None:
                self._beat.said()

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self._t0 = time.time()
        if not self.enabled:
            if self.heartbeat_s > 0:
                self._beat = Heartbeat(self._still_running, self._say, self.heartbeat_s).start()
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]cells"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} items/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("[dim]{task.description}"),
            transient=False,
        )
        self._task = self._bar.add_task("", total=total, completed=done, rate="-")
        self._bar.start()

    def _still_running(self, _elapsed: float) -> str | None:
        if self._cell is None:
            return None
        return f"{self._cell}: still running, {duration(time.time() - self._cell_t0)} so far"

    def describe(self, text: str) -> None:
        self._cell, self._cell_t0 = text, time.time()
        if self.enabled:
            self._bar.update(self._task, description=text)
        else:
            self._say(f"{text}: started")

    def time_left(self) -> str:
        if not self._seconds:
            return "unknown until a cell has run"
        mean = sum(self._seconds) / len(self._seconds)
        return f"about {duration(mean * (self.total - self.done))} (mean of {len(self._seconds)} cells so far)"

    def advance(self, n_items: int, failed: bool = False) -> None:
        ran = self._cell is not None
        elapsed = time.time() - self._cell_t0 if ran else 0.0
        self.done += 1
        self.items += n_items
        self.failed += failed
        if ran:
            self._seconds.append(elapsed)
        if self.enabled:
            rate = self.items / max(time.time() - self._t0, 1e-9)
            self._bar.update(self._task, advance=1, rate=f"{rate:.1f}")
        elif ran:
            self._say(
                f"{self._cell}: {'failed' if failed else 'done'} in {duration(elapsed)} ({n_items} item "
                f"answers); time left {self.time_left()}"
            )
        elif n_items:  # a Ray worker's cell: no start line was seen here
            self._say(f"a cell {'failed' if failed else 'finished'} ({n_items} item answers)")
        self._cell = None

    def stop(self) -> None:
        if self._beat is not None:
            self._beat.stop()
        if self.enabled:
            self._bar.stop()
