"""The one loop every importer reads its files with: find the files, read each (capped and checked,
safetyrepro/limits.py) with the files that come with it, turn them into runs, and record the sha256 of every
file used. A `Reader` says how for one format (lm-eval results folders, Inspect logs, Every Eval Ever records).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from safetyrepro.console import paced
from safetyrepro.hashing import sha256_bytes
from safetyrepro.limits import Refused, check_json_text, decode_text, loads_json, read_capped

from .common import BadInput, BadInputError, Reading, Run, SourceFile, Unmapped, bad_file
from .mapping import Mapping


@dataclass(frozen=True)
class Companion:
    """A file read with the one it belongs to (a results file's samples, a record's instance rows)."""

    path: Path
    kind: str  # as provenance.csv names it
    data: bytes
    parsed: Any


class Reader(Protocol):
    package: str  # what run.json's `source` says was imported
    what: str  # the files `find` finds, as the progress line names them
    kind: str  # a found file's kind, as provenance.csv names it

    def find(self, paths: Sequence[str]) -> tuple[list[Path], list[BadInput]]:
        """The files under `paths` (folders searched at any depth, links not followed), and the paths
        that are not such files or hold none."""

    def read(self, path: Path) -> tuple[bytes, Any]:
        """One found file's bytes and its parsed, checked contents."""

    def companions(self, path: Path, parsed: Any) -> list[Companion]:
        """The files that came with it, read and checked (a format whose files come alone: none)."""
        return []

    def runs(
        self, path: Path, parsed: Any, companions: list[Companion], mapping: Mapping, rules, metric: str | None
    ) -> list[Run | Unmapped]:
        """What it recorded, as runs and the tasks that could not be placed (pure)."""


@contextlib.contextmanager
def about(path: Path | str) -> Iterator[None]:
    """A file that cannot be read, or is refused by a cap or check, inside the block is a bad input `path`."""
    try:
        yield
    except OSError as e:
        raise bad_file(path, f"cannot be read ({e.strerror})") from None
    except Refused as e:
        raise bad_file(path, e.reason) from None


def read_paths(
    reader: Reader, paths: Sequence[str], mapping: Mapping, rules, metric: str | None = None, skip_bad: bool = False
) -> Reading:
    """Every file `reader` finds under `paths` with its companions, as runs; a bad file raises
    `BadInputError` at once unless `skip_bad`, which lists it and goes on."""
    files, missing = reader.find(paths)
    if missing and not skip_bad:
        raise BadInputError(missing[0])
    reading = Reading(reader.package, bad=missing)
    for path in paced(files, reader.what, prefix="import"):
        try:
            with about(path):
                data, parsed = reader.read(path)
                companions = reader.companions(path, parsed)
                got = reader.runs(path, parsed, companions, mapping, rules, metric)
        except BadInputError as e:
            if not skip_bad:
                raise
            reading.bad.append(e.bad)
            continue
        for p, kind, d in [(path, reader.kind, data), *((c.path, c.kind, c.data) for c in companions)]:
            reading.sources.append(SourceFile(str(p), kind, sha256_bytes(d), len(d)))
        reading.runs += [g for g in got if isinstance(g, Run)]
        reading.unmapped += [g for g in got if isinstance(g, Unmapped)]
    return reading


def find(
    paths: Sequence[str], takes: Callable[[Path], bool], search: Callable[[Path], list[Path]], wrong: str, none: str
) -> tuple[list[Path], list[BadInput]]:
    """The files `takes` accepts among `paths` (a file not accepted: bad input saying `wrong`) and those
    `search` finds in the folders among them (none: bad input saying `none`)."""
    found: list[Path] = []
    bad = []
    for p in map(Path, paths):
        if p.is_file():
            if takes(p):
                found.append(p)
            else:
                bad.append(BadInput(str(p), wrong))
        elif p.is_dir():
            here = search(p)
            if not here:
                bad.append(BadInput(str(p), none + links_note(p)))
            found += here
        else:
            bad.append(BadInput(str(p), "does not exist"))
    return sorted(dict.fromkeys(found)), bad


def links_note(folder: Path, limit: int = 3) -> str:
    """ "; N linked folder(s) were not followed (e.g. X)" for the symbolic links to folders under
    `folder` (a search never follows them), else ""."""
    links = []
    for root, dirs, _files in os.walk(folder):
        links += [Path(root) / d for d in dirs if (Path(root) / d).is_symlink()]
        if len(links) >= limit:
            break
    if not links:
        return ""
    return (
        f"; {len(links)}{'+' if len(links) >= limit else ''} linked folder(s) under it were not followed "
        f"(e.g. {links[0]} -> {os.readlink(links[0])}): name the folder itself"
    )


def json_file(path: Path, check: Callable[[Any], str | None], not_json: str | None = None) -> tuple[bytes, Any]:
    """A found JSON file's bytes and parsed contents, capped and checked (safetyrepro/limits.py); refused when
    it is not JSON, saying `not_json` (default: the parser's message), or when `check` says why it is no file
    of its format."""
    data = read_capped(path)
    try:
        parsed = loads_json(decode_text(data))
    except ValueError as e:
        raise Refused(not_json or f"is not JSON ({str(e).splitlines()[0][:160]})") from None
    if problem := check(parsed):
        raise bad_file(path, problem)
    return data, parsed


def json_lines(data: bytes, damaged: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line of a JSON-lines file; a line that is not JSON is
    refused with `damaged` (default: the parser's message) in brackets."""
    text = decode_text(data)
    check_json_text(data)
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, loads_json(line, checked=True)
        except Refused as e:
            raise Refused(f"line {n} {e.reason}") from None
        except ValueError as e:
            raise Refused(f"line {n} is not JSON ({damaged or str(e).splitlines()[0][:120]})") from None
