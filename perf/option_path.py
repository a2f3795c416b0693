"""How far certify's command-line options travel in the code (issue 55's measure of how easy the code is to follow).

Runs `safetyrepro certify replay` on issue 52's readings case under a call tracer and follows the two objects that
carry the options: the parsed arguments (argparse's Namespace) and the CertifyOptions made from them. A function
"holds" the options when one of its arguments is one of them (the Namespace, CertifyOptions, SweepOptions) or
carries them as its `options` (the result, a run). Each function that holds them is a stay (counted once, at its first
entry: the rounds call the same ones again and again); walking the stays in the order they were first entered, a
return is a stay in a module the path had already left. Not a timed benchmark: it prints two counts.

    python perf/option_path.py            # replay; --live adds a held-only live run (no model work)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "analysis"))

import readings_grid as case  # noqa: E402

from safetyrepro.certify.algorithm import CertifyOptions  # noqa: E402
from safetyrepro.cli import main  # noqa: E402
from safetyrepro.sweep.options import SweepOptions  # noqa: E402

SOURCES = tuple(str(ROOT / d) for d in ("safetyrepro", "analysis", "adapters", "crosspkg", "safetyrepro_tasks"))


def trace(argv: list[str]) -> list[tuple[str, str]]:
    """(module file, function) of each function that held the options, in the order first entered."""
    seen: dict[tuple[str, str], None] = {}

    def held(frame) -> bool:
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            value = frame.f_locals.get(name)
            if isinstance(value, CertifyOptions | argparse.Namespace | SweepOptions):
                return True
            if isinstance(getattr(value, "options", None), CertifyOptions | SweepOptions):  # a result, a run
                return True
        return False

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(SOURCES) and held(frame):
            seen.setdefault((frame.f_code.co_filename, frame.f_code.co_qualname), None)
        return None

    sys.settrace(tracer)
    try:
        code = main(argv)
    finally:
        sys.settrace(None)
    assert code == 0, code
    return list(seen)


def counts(path: list[tuple[str, str]]) -> tuple[int, int]:
    """(stays, returns to a module already left)."""
    left: set[str] = set()
    returns, current = 0, None
    for module, _ in path:
        if module != current:
            if module in left:
                returns += 1
            if current is not None:
                left.add(current)
            current = module
    return len(path), returns


def main_() -> None:
    live = "--live" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        grid, items = case.write_case(Path(tmp) / "case")
        runs = {"certify replay": ["certify", "replay", str(items), "--grid", str(grid), "--quiet"]}
        if live:  # the published study's records, re-read: no model work
            runs["certify live --held-only"] = [
                *(
                    "certify",
                    "live",
                    "--models",
                    "smollm2",
                    "gemma3-270m",
                    "--configs",
                    "xstest/T1/greedy/0shot/logprob",
                ),
                *("--precision", "fp32", "--limit", "24", "--records", str(ROOT / "study"), "--held-only", "--quiet"),
                *("--selection", "none"),
            ]
        for k, (name, argv) in enumerate(runs.items()):
            path = trace([*argv, "--out", str(Path(tmp) / f"c{k}")])
            stays, returns = counts(path)
            print(f"{name}: {stays} function stays, {returns} returns to a module already left")
            for module, function in path:
                print(f"  {Path(module).relative_to(ROOT)}:{function}")


if __name__ == "__main__":
    main_()
