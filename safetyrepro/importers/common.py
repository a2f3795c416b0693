"""The records the importers produce (`Run`: one task of one recorded run, its axes decided, with what must
agree before runs are pooled and its item rows) and the small pure helpers they share; nothing here reads or
writes a file (`assemble` turns runs into the grid)."""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_bytes
from safetyrepro.limits import MAX_CHOICE, shorten, whole_number

if TYPE_CHECKING:  # the CLI imports this module at start-up; the envelope reads YAML
    from safetyrepro.tasks.envelope import Config

# lm-eval and Inspect record dtypes in several spellings; the grid's precision column uses one.
# ("auto" is no spelling of one: precision_label's default fallback)
PRECISIONS = {
    **dict.fromkeys(("bf16", "bfloat16", "torch.bfloat16"), "bf16"),
    **dict.fromkeys(("fp16", "float16", "half", "torch.float16"), "fp16"),
    **dict.fromkeys(("fp32", "float32", "float", "torch.float32"), "fp32"),
    "nf4": "nf4",
    "int8": "int8",
}
DUPLICATES = ("newest", "keep", "refuse")  # --duplicates: what to do with several runs of one cell and seed
SCORE_TOLERANCE = 1e-9  # per-item values must average to the recorded score this closely
TOKEN = re.compile(r"[A-Za-z0-9._-]{1,24}")


@dataclass(frozen=True)
class DecodingSpec:
    """A decoding as the run recorded it; `name` is the grid's decoding value."""

    name: str
    temperature: float
    top_p: float
    do_sample: bool
    recorded: bool = True  # False: the run left the sampling settings to the model's provider


@dataclass(frozen=True)
class ItemRow:
    item_id: str
    item_score: float
    prediction: int | None = None
    gold: int | None = None
    raw_output: str | None = None
    parsed: bool | None = None
    prompt_sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class Run:
    """One task of one recorded run: a cell's score for one seed, with where it came from. The defaults are
    what a run that records nothing about them is read as."""

    package: str  # lm-eval | inspect
    package_version: str
    source: str  # the results file or .eval log
    samples_source: str | None  # the samples file (lm-eval) or the log itself (Inspect), when items were read
    task: str
    model: str  # the grid label (after the mapping file's `models`)
    model_recorded: str  # how the run named the model
    model_spec: dict[str, Any]  # backend kind, spec and arguments, for run.json
    weights_id: str | None = None  # a weights hash the run recorded, if any
    precision: str
    axes: Config  # the configuration's axes (its precision is the `precision` field's)
    decoding: DecodingSpec
    stress_template: bool  # T4 and what derives from it, or a mapping entry marked stress
    seed: int = 0
    metric: str
    tie_rule: str | None = None
    score: float
    parse_rate: float = 1.0
    n_items: int
    item_ids: tuple[str, ...] | None
    items: tuple[ItemRow, ...] | None
    items_note: str  # why there are no item rows, when there are none
    created: float  # when the run was made (seconds since the epoch), for --duplicates newest
    package_label: str = ""  # the grid's package column, which assemble derives (version, what differs)


@dataclass(frozen=True)
class Unmapped:
    """A task of a readable run that the importer could not place in the grid, and why."""

    source: str
    task: str
    model: str
    reason: str


@dataclass(frozen=True)
class BadInput:
    """A file that cannot be imported at all (unreadable, partial, unsupported version, orphaned)."""

    path: str
    reason: str

    def line(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class SourceFile:
    path: str
    kind: str
    sha256: str
    size: int


@dataclass
class Reading:
    """Everything an importer read from its paths."""

    package: str
    runs: list[Run] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    bad: list[BadInput] = field(default_factory=list)
    sources: list[SourceFile] = field(default_factory=list)


class BadInputError(UserError):
    """One bad input file: raised at once unless --skip-bad collects them."""

    def __init__(self, bad: BadInput):
        super().__init__(bad.line() + " (pass --skip-bad to import the rest and list the bad files)")
        self.bad = bad


def bad_file(path: Any, reason: str) -> BadInputError:
    return BadInputError(BadInput(str(path), reason))


class Unplaced(Exception):
    """A task of a readable run that cannot be placed in the grid; its message is the reason (`Unmapped`)."""


def share(value: Any, metric: str, hint: str) -> float:
    """A recorded score as a share in [0, 1] (the grid's scale), else the task is not placed."""
    score = as_unit_score(value)
    if score is None:
        raise Unplaced(f"metric {metric} is {shorten(value)}, not a share in [0, 1]{hint}")
    return score


def short_hash(text: str, n: int = 8) -> str:
    return sha256_bytes(text.encode("utf-8"))[:n]


def token(value: Any) -> str:
    """A value as a piece of an axis name: itself when short and plain, else a hash, because axis
    values travel inside config ids (`/`-separated) and file names."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text if TOKEN.fullmatch(text) else "h" + short_hash(text)


def precision_label(*candidates: Any, default: str = "auto") -> str:
    """The first recognised dtype among `candidates` (in the grid's spelling), else `default`."""
    keys = (str(c).strip().lower() for c in candidates)  # None and "" are no key of PRECISIONS
    return next((PRECISIONS[k] for k in keys if k in PRECISIONS), default)


def as_unit_score(value: Any) -> float | None:
    """A per-item or cell value as a float in [0, 1], or None when it is not one."""
    if not isinstance(value, (int, float)):  # a bool is an int: 0.0 or 1.0
        return None
    x = float(value)
    return x if math.isfinite(x) and 0.0 <= x <= 1.0 else None


def answer_index(value: Any, field: str) -> int | None:
    """A recorded answer index (prediction, gold label): a whole number in range, refused when out of
    it; anything but an int means none was recorded."""
    if isinstance(value, int) and not isinstance(value, bool):
        return whole_number(value, field, 0, MAX_CHOICE)
    return None


def number(value: Any) -> float | None:
    """A recorded setting (temperature, top_p, a rate) as a finite float, or None when it is not one."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def recorded_time(value: Any) -> float | None:
    """When a run says it was made (seconds since the epoch, or ISO 8601 text) as seconds since the
    epoch, for --duplicates newest; None when it is neither."""
    seconds = number(value)
    if seconds is not None:
        return seconds
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def split_package(label: str) -> tuple[str, str]:
    """(package, version or "") of a grid's package label, `lm-eval==0.4.13 [items n=8:ab12cd]`
    (assemble's package_labels and comparability make them)."""
    name, _, version = label.split(" [", 1)[0].partition("==")
    return name, version


def kept_items(rows: list[ItemRow], score: float, why_not: str) -> tuple[tuple[ItemRow, ...] | None, str]:
    """(the item rows, "") when they average to the recorded score, else (None, `why_not`): then the
    metric is not a mean over items (or the rows belong to another run), and the rows would mislead
    the item-level tests."""
    mean = sum(r.item_score for r in rows) / len(rows) if rows else math.nan
    if abs(mean - score) <= SCORE_TOLERANCE * max(1.0, abs(score)):
        return tuple(rows), ""
    return None, why_not


def item_set_key(item_ids: tuple[str, ...] | None, n_items: int) -> str:
    """A short name for the set of items a run scored: their ids' hash when known, else the count."""
    if item_ids is None:
        return f"n={n_items}"
    return f"n={n_items}:{short_hash(chr(10).join(sorted(item_ids)), 6)}"
