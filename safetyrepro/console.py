"""Terminal output through rich, with one change: a closed pipe (`safetyrepro ... | head`) is an
ordinary BrokenPipeError, which the command line ends quietly with exit code 0 (rich's own
handler exits with 1)."""

from __future__ import annotations


def console(**kwargs):
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(**kwargs)
