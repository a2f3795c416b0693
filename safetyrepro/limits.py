"""Caps on untrusted input (docs/formats.md, "Limits on untrusted input"), and the bounded readers
that apply them: files read whole, JSON (depth, digits, lone surrogates) and YAML (no anchors or
aliases, depth) are checked before they are parsed, so a hostile file is refused in a linear scan
instead of exhausting memory, time or Python's recursion limit. Every cap is a constant here.

Readers raise `Refused(reason)`: the reason names the field or the cap, the caller adds the file
(importers turn it into a bad input, the config loaders into a `UserError`).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetyrepro.errors import UserError

if TYPE_CHECKING:  # loaded where a YAML file is read
    import yaml

MiB = 1 << 20
MAX_FILE_BYTES = 512 * MiB  # one file an importer reads whole: results_*.json, samples_*.jsonl, an Inspect log
MAX_CONFIG_BYTES = 1 * MiB  # a models file or a mapping file (YAML written by hand)
MAX_MEMBER_BYTES = 256 * MiB  # one member of an Inspect .eval archive, expanded
MAX_ARCHIVE_BYTES = 2048 * MiB  # all members of one .eval archive, expanded
MAX_MEMBERS = 200_000  # members of one .eval archive
MAX_JSON_DEPTH = 64  # nesting of JSON arrays/objects, and of YAML collections
MAX_NUMBER_DIGITS = 100  # digits of one number literal in JSON
MAX_LABEL_CHARS = 200  # a model label
MAX_SPEC_CHARS = 2000  # a model spec, and its model_args
MAX_SHOTS = 1000  # few-shot examples of a run
MAX_SEED = 2**32 - 1  # a run's sampling seed (numpy's range)
MAX_COUNT = 10**9  # an item count (n-samples, sample_len)
MAX_CHOICE = 2**31 - 1  # a gold label index (a sample's target)
MAX_ANALYSIS_SEED = 2**31 - 1  # analyze --seed
MAX_BOOTSTRAP = 100_000  # analyze --bootstrap
MESSAGE_VALUE_CHARS = 200  # a value quoted in a message is cut to this many characters
MESSAGE_CHARS = 2000  # one error line is cut to this many characters

_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# in JSON text: an escaped backslash, a valid surrogate pair, or a lone surrogate escape (the third)
_SURROGATE_ESCAPE = re.compile(
    rb"\\(?:\\|u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|"
    rb"(u[dD][89a-fA-F][0-9a-fA-F]{2}))"
)
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_INNER_PAIR = re.compile(rb"\[\]|\{\}")
_LONG_NUMBER = re.compile(rb"[0-9]{%d,}" % (MAX_NUMBER_DIGITS + 1))
_WHOLE_TEXT = re.compile(r"\s*\+?([0-9]+)\s*")


class Refused(Exception):
    """Input over a cap or malformed; `reason` says which field or cap, without the file's name."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def shorten(value: Any, limit: int = MESSAGE_VALUE_CHARS) -> str:
    """`repr(value)` for a message, cut to `limit` characters with how long it was."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"… ({len(value)} characters)"
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 20:
        return f"a {type(value).__name__} of {len(value)} entries"
    text = _safe_repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except (RecursionError, ValueError):  # a deep structure, or an int beyond str()'s digits limit
        return f"a {type(value).__name__}"


def cut_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


# -- whole files ------------------------------------------------------------------------------------
def read_capped(path: str | Path, limit: int = MAX_FILE_BYTES, cap: str = "MAX_FILE_BYTES") -> bytes:
    """The file's bytes, refused without reading it when it is larger than `limit` (OSError passes)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"is larger than {limit} bytes (the cap {cap} on a file read whole)")
    return data


def decode_text(data: bytes) -> str:
    """Strict UTF-8 (a byte-order mark is dropped): invalid bytes are refused, never replaced."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Refused(
            f"is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start} is invalid; text fields "
            "such as item ids must be UTF-8, they are never replaced)"
        ) from None


# -- JSON -------------------------------------------------------------------------------------------
def check_json_text(data: bytes | str) -> None:
    """Refuse JSON (or JSON lines) nested deeper than MAX_JSON_DEPTH, with a number literal longer than
    MAX_NUMBER_DIGITS, or with a lone surrogate escape (`\\ud800`), in linear scans that do not recurse."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if b"\\u" in raw or b"\\U" in raw:
        for m in _SURROGATE_ESCAPE.finditer(raw):
            if m.group(1):
                raise Refused(
                    f"holds a lone surrogate escape (\\{m.group(1).decode()} at offset {m.start()}): "
                    "not a Unicode character (a damaged or forged text field)"
                )
    outside = _JSON_STRING.sub(b'""', raw)
    long = _LONG_NUMBER.search(outside)
    if long:
        n = len(long.group(0))  # greedy from the run's first digit: the whole run
        raise Refused(f"holds a number of {n} digits (at most {MAX_NUMBER_DIGITS}, the cap MAX_NUMBER_DIGITS)")
    brackets = _NOT_BRACKET.sub(b"", outside)
    for _ in range(MAX_JSON_DEPTH):  # each pass removes the innermost level
        if not brackets:
            return
        brackets, n = _INNER_PAIR.subn(b"", brackets)
        if n == 0:
            return  # unbalanced: not JSON, which the parser says
    if _INNER_PAIR.search(brackets):
        raise Refused(f"is nested more than {MAX_JSON_DEPTH} levels deep (the cap MAX_JSON_DEPTH)")


def loads_json(text: str, checked: bool = False) -> Any:
    """`json.loads` after `check_json_text` (unless done already); ValueError for text that is not JSON."""
    if not checked:
        check_json_text(text)
    try:
        return json.loads(text)
    except RecursionError:
        raise Refused(f"is nested more than {MAX_JSON_DEPTH} levels deep (the cap MAX_JSON_DEPTH)") from None


# -- YAML -------------------------------------------------------------------------------------------
def _line(event: yaml.Event) -> str:
    """The 1-based line an event starts on (PyYAML's parser marks every event)."""
    mark = event.start_mark
    return str(mark.line + 1) if mark is not None else "?"


def load_yaml(data: bytes, what: str) -> Any:
    """A small hand-written YAML file (`what` names it in messages: "models file x.yaml"): at most
    MAX_CONFIG_BYTES, UTF-8, no anchors or aliases (`&a`, `*a`: the expansion of nested aliases is
    exponential), nested at most MAX_JSON_DEPTH deep; then `yaml.safe_load`. UserError otherwise."""
    import yaml

    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"{what} is {len(data)} bytes; at most {MAX_CONFIG_BYTES} (the cap MAX_CONFIG_BYTES)")
    try:
        text = decode_text(data)
    except Refused as e:
        raise UserError(f"{what} {e.reason}") from None
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            anchor = getattr(event, "anchor", None)
            if isinstance(event, yaml.AliasEvent) or anchor is not None:
                alias = isinstance(event, yaml.AliasEvent)
                raise UserError(
                    f"{what} uses a YAML {'alias' if alias else 'anchor'} ({'*' if alias else '&'}"
                    f"{str(anchor)[:40]}, line {_line(event)}); anchors and aliases "
                    "are not allowed (nested aliases expand exponentially): write each value out"
                )
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise UserError(
                        f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (line "
                        f"{_line(event)}; the cap MAX_JSON_DEPTH)"
                    )
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as e:
        if "nesting depth" in str(e) or "flow level" in str(e):  # libyaml's own limit, met before ours
            raise UserError(
                f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (the cap MAX_JSON_DEPTH)"
            ) from None
        raise UserError(f"{what} is not valid YAML: {cut_line(str(e).splitlines()[0], MESSAGE_VALUE_CHARS)}") from None
    except RecursionError:
        raise UserError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (the cap MAX_JSON_DEPTH)") from None


# -- values -----------------------------------------------------------------------------------------
def whole_number(value: Any, field: str, lo: int, hi: int, *, text: bool = False) -> int:
    """`value` as a whole number in [lo, hi]: an int, a float with no fraction, or (with `text`) a
    string of digits; NaN, Infinity, booleans, other strings, lists and objects are refused."""
    x = None
    if isinstance(value, bool):
        x = None
    elif isinstance(value, int):
        x = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        x = int(value)
    elif text and isinstance(value, str):
        m = _WHOLE_TEXT.fullmatch(value)
        if m and len(m.group(1)) <= 20:
            x = int(m.group(1))
        elif m:
            x = hi + 1  # digits beyond any cap
    if x is None or not lo <= x <= hi:
        raise Refused(f"{field} is {shorten(value)}; expected a whole number from {lo} to {hi}")
    return x


def label_problem(label: str, what: str = "model label") -> str | None:
    """Why `label` cannot name a model (too long, a lone surrogate, a control character), or None."""
    if len(label) > MAX_LABEL_CHARS:
        return (
            f"{what} {shorten(label)} is longer than {MAX_LABEL_CHARS} characters (the cap MAX_LABEL_CHARS); "
            "give the model a shorter label"
        )
    if _LONE_SURROGATE.search(label):
        return f"{what} {shorten(label)} holds a lone surrogate (not a Unicode character)"
    if _CONTROL.search(label):
        return f"{what} {shorten(label)} holds a control character (a newline, tab, ...)"
    hidden = next((c for c in label if unicodedata.category(c) == "Cf"), None)
    if hidden is not None:  # a zero-width space or a right-to-left override: two labels would print alike
        return (
            f"{what} {label.encode('unicode_escape').decode('ascii')!r} holds an invisible format character "
            f"(U+{ord(hidden):04X}), so it would not print as what it is"
        )
    return None


def has_lone_surrogate(text: str) -> bool:
    return _LONE_SURROGATE.search(text) is not None
