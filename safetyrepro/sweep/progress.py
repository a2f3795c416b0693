"""A live progress bar for a sweep: cells done / total, items per second, ETA, current cell."""

from __future__ import annotations

import sys
import time


class SweepProgress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled and sys.stderr.isatty()
        self.items = 0
        self.failed = 0
        self._t0 = time.time()

    def start(self, total: int, done: int) -> None:
        self.total, self.done = total, done
        self._t0 = time.time()
        if not self.enabled:
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
            TextColumn("[bold]cells"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} items/s"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("[dim]{task.description}"), transient=False,
        )
        self._task = self._bar.add_task("", total=total, completed=done, rate="-")
        self._bar.start()

    def describe(self, text: str) -> None:
        if self.enabled:
            self._bar.update(self._task, description=text)
        else:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def advance(self, n_items: int, failed: bool = False) -> None:
        self.done += 1
        self.items += n_items
        self.failed += failed
        if self.enabled:
            rate = self.items / max(time.time() - self._t0, 1e-9)
            self._bar.update(self._task, advance=1, rate=f"{rate:.1f}")

    def stop(self) -> None:
        if self.enabled:
            self._bar.stop()
