"""Per-item scores of any task, read from one run, for `safetyrepro verdict A B` on tasks SafetyRepro does not
define: an lm-eval output folder written with `--log_samples`, or Inspect logs (a file or a folder of them).
Nothing is mapped onto SafetyRepro's benchmarks and nothing is guessed: each task keeps its own name, each
metric the run's own name and, where the run records it, its direction (lm-eval's `higher_is_better`).

Items are keyed by (item id, epoch): lm-eval's `doc_id` (epoch 1; lm-eval scores each document once) and
Inspect's sample id and epoch. Beside each item the run's hash of the item itself and of the prompt the model
was given are kept, so that two runs are only paired on the same items, and a caller can say how many
differ. The files are found, checked and parsed by the importers' own readers (importers/reader.py's `Reader`s
for lm-eval and Inspect: capped, safe against hostile files); this module only reads what an import leaves
out (every metric, epochs, the hashes).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from safetyrepro.analysis.paired.two_runs import PairedScores
from safetyrepro.errors import UserError
from safetyrepro.limits import Refused, decode_text, loads_json, read_capped, shorten

from . import inspect_logs, lm_eval_runs
from .common import BadInputError, as_unit_score
from .inspect_logs import early_stopped, task_name
from .lm_eval_runs import RESULTS_FILE, SAMPLES_FILE
from .mapping import model_label, parse_model_args
from .reader import Reader, about

MEAN_TOLERANCE = 1e-6  # the items' mean must give the run's reported score this closely (else: not a mean)


@dataclass(frozen=True)
class ItemScores:
    """One task x metric of one run: each item's score, per epoch."""

    task: str
    metric: str  # the run's own name: lm-eval `acc,none` (metric,filter); Inspect the scorer (`scorer/key`)
    scores: Mapping[tuple[str, int], float]  # (item id, epoch) -> score in [0, 1]
    items: Mapping[str, str]  # item id -> hash of the item (lm-eval: document and target; Inspect: input, target)
    prompts: Mapping[str, str]  # item id -> hash of the prompt the model was given
    higher_is_better: bool | None = None  # as the run records it (lm-eval); None: not recorded
    reported: float | None = None  # the run's own aggregate of this metric
    note: str = ""  # why these scores cannot be compared ("" when they can)
    # where the run records no hash (lm-eval without doc_hash / prompt_hash), the same read from the content it
    # logged: the `doc` field and target (else the arguments), and the prompt text; `items`/`prompts` omit it
    contents: Mapping[str, str] = field(default_factory=dict)
    prompt_texts: Mapping[str, str] = field(default_factory=dict)
    # an early-stopped Inspect eval: the (item, epoch) records its early stopping stopped, and its decision
    stopped: frozenset[tuple[str, int]] = frozenset()
    stop_sentence: str = ""
    # item id -> what the run logged about the item (lm-eval: its `doc`; Inspect: the sample's metadata), where
    # --cluster FIELD reads each item's cluster
    fields: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunScores:
    """Everything one run holds: its model and, per task x metric, the item scores."""

    package: str  # lm-eval | inspect
    path: str
    model: str
    tasks: tuple[ItemScores, ...]
    files: tuple[str, ...] = field(default_factory=tuple)


def text_hash(value: Any) -> str:
    """A short, stable hash of a text or a JSON-able value (an Inspect input: a string or messages)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def package_of(path: str) -> str:
    """Which format a run is, read from what it holds, not from file extensions: a folder is lm-eval when it
    holds lm-eval's results_<date>.json / samples_<task>_<date>.jsonl files, Inspect when it holds readable
    Inspect logs (a stray .eval or .json file beside lm-eval's files is no log: it is left alone), and
    refused, in one line naming one file of each, when it holds both. A folder holding neither is read as
    Inspect when it holds a .eval / .json file (the reader then says why that file is no log), else as lm-eval
    (which says it holds no results file)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"run {path} does not exist")
    if p.is_file():
        named_lm_eval = RESULTS_FILE.fullmatch(p.name) or SAMPLES_FILE.fullmatch(p.name)
        return "lm-eval" if named_lm_eval and not _is_inspect_log(p) else "inspect"
    files = sorted(f for f in p.rglob("*") if f.is_file() and not f.is_symlink())
    lm_eval = [f for f in files if RESULTS_FILE.fullmatch(f.name) or SAMPLES_FILE.fullmatch(f.name)]
    candidates = [f for f in files if f.suffix in (".eval", ".json") and f not in lm_eval]
    logs = [f for f in candidates if _is_inspect_log(f)]
    if lm_eval and logs:
        raise UserError(
            f"run {path} holds both an lm-eval run ({_some(lm_eval)}) and Inspect logs ({_some(logs)}): a run is "
            f"one or the other; name the lm-eval folder or the Inspect log itself"
        )
    if logs or (candidates and not lm_eval):
        return "inspect"
    return "lm-eval"


def _inspect_logs_in(path: str) -> list[str]:
    """The logs of an Inspect run: those Inspect lists (by its file names) and those that are logs by content
    (a log saved under another name); a folder holding none stays itself, for the reader to say so."""
    p = Path(path)
    if not p.is_dir():
        return [path]
    listed, _ = inspect_logs.READER.find([path])
    read = [f for f in p.rglob("*") if f.suffix in (".eval", ".json") and f.is_file() and _is_inspect_log(f)]
    return [str(f) for f in sorted({*listed, *read})] or [path]


def _some(files: list[Path]) -> str:
    return f"{files[0]}" + (f" and {len(files) - 1} more" if len(files) > 1 else "")


INSPECT_MEMBERS = ("header.json", "_journal/start.json")  # what every .eval log archive holds


def _is_inspect_log(path: Path) -> bool:
    """Whether a file's content is an Inspect log: a zip archive with a log header (.eval), or a JSON object
    with the log's `version` and `eval` fields. Read capped; a file that cannot be read is none."""

    try:
        with path.open("rb") as f:
            head = f.read(4)
        if head.startswith(b"PK"):
            with zipfile.ZipFile(path) as archive:
                return any(name in INSPECT_MEMBERS for name in archive.namelist())
        if not head.lstrip()[:1] == b"{" or path.suffix != ".json":
            return False
        value = loads_json(decode_text(read_capped(path)))
    except (OSError, ValueError, zipfile.BadZipFile, Refused):
        return False
    return isinstance(value, dict) and "version" in value and isinstance(value.get("eval"), dict)


def read_run(path: str) -> RunScores:
    """One run's per-item scores of every task it holds; a run of several models, a task held twice, or a
    file that cannot be read is one line (UserError)."""
    return _read_lm_eval(path) if package_of(path) == "lm-eval" else _read_inspect(path)


def _files(reader: Reader, path: str) -> list[tuple[Path, bytes, Any]]:
    """Each file `reader` finds under `path`, read and checked: (its path, bytes, parsed contents)."""
    found, bad = reader.find(_inspect_logs_in(path) if reader is inspect_logs.READER else [path])
    if bad:
        raise UserError(bad[0].line())
    out = []
    for f in found:
        try:
            with about(f):
                data, parsed = reader.read(f)
        except BadInputError as e:  # one run, one line: --skip-bad is import's
            raise UserError(e.bad.line()) from None
        out.append((f, data, parsed))
    return out


def task_names(path: str) -> list[str]:
    """The tasks a run holds, read from its results files or log headers (no samples of lm-eval runs)."""
    if package_of(path) == "lm-eval":
        return [t for _, _, data in _files(lm_eval_runs.READER, path) for t in data["configs"]]
    return [task_name(header.eval) for _, _, (header, _) in _files(inspect_logs.READER, path)]


INVISIBLE = ("Cf", "Cc", "Cs", "Co", "Cn", "Zl", "Zp", "Zs")  # Unicode categories a label does not show as itself


def escaped(label: str) -> str:
    """A model name as read from a run, with its invisible characters (format characters: zero-width space,
    right-to-left override; controls, odd spaces) written as \\uXXXX: two runs whose names differ only there
    print differently, and no name reorders the line it is printed in. Names that still print the same are
    then one model to `verdict`, which says so and asks for --labels."""
    return "".join(
        (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
        if c != " " and unicodedata.category(c) in INVISIBLE
        else c
        for c in label
    )


def _one_model(path: str, models: set[str]) -> str:
    if len(models) != 1:
        raise UserError(
            f"run {path} holds {len(models)} models ({', '.join(sorted(models)) or 'none'}); verdict compares one "
            f"model's run with another's: name one model's folder or log"
        )
    return models.pop()


def _twice(path: str, seen: dict[str, str], task: str, source: str) -> None:
    if task in seen:
        raise UserError(
            f"run {path} holds task {task!r} twice ({seen[task]} and {source}): a paired verdict compares one run "
            f"of each task; name one results file, log or folder per run"
        )
    seen[task] = source


# -- lm-eval ---------------------------------------------------------------------------------------
def _read_lm_eval(path: str) -> RunScores:
    tasks: list[ItemScores] = []
    models: set[str] = set()
    seen: dict[str, str] = {}  # task -> the file that held it
    files: list[str] = []
    for r, _, data in _files(lm_eval_runs.READER, path):
        config = data["config"]
        models.add(
            escaped(
                model_label(
                    str(config.get("model") or "?"), parse_model_args(config.get("model_args")), data.get("model_name")
                )
            )
        )
        try:
            with about(r):
                companions = lm_eval_runs.READER.companions(r, data)
        except BadInputError as e:
            raise UserError(_truncated(e.bad.path) or e.bad.line()) from None
        logged = {c.parsed[0]: (c.path, c.parsed[1]) for c in companions}
        files += [str(r), *(str(c.path) for c in companions)]
        for task in data["configs"]:
            _twice(path, seen, task, str(r))
            if task not in logged:
                raise UserError(
                    f"{r}: task {task!r} has no samples file beside it: run lm_eval with --log_samples (a paired "
                    f"verdict needs each item's score)"
                )
            samples, lines = logged[task]
            _check_samples(samples, lines, _expected_items(data, task))
            tasks.extend(_lm_eval_task(data, task, lines))
    return RunScores("lm-eval", path, _one_model(path, models), tuple(tasks), tuple(files))


def _truncated(path: str) -> str:
    """ "samples file X is truncated at line N ..." when `path` is a JSON-lines file whose last line is cut
    mid-record (no newline after it, and not JSON), else "" (another damage: the reader's own words)."""
    if not path.endswith(".jsonl"):
        return ""
    try:
        data = read_capped(Path(path))
    except (OSError, Refused):
        return ""
    if not data.strip() or data.endswith(b"\n"):
        return ""
    lines = data.split(b"\n")
    try:
        loads_json(decode_text(lines[-1]))
    except (ValueError, Refused):
        return (
            f"samples file {path} is truncated at line {len(lines)}: its last record is cut off mid-line (an "
            f"interrupted run or an incomplete copy); copy the whole file or rerun lm_eval with --log_samples"
        )
    return ""


def _expected_items(data: dict, task: str) -> int | None:
    """The documents the run says it scored for `task`: n-samples effective and the results' sample_len, the
    smaller where they disagree (a file is called short only when both say it is)."""
    counts = (data.get("n-samples") or {}).get(task)
    entry = data["results"].get(task) if isinstance(data["results"].get(task), dict) else {}
    said = ((counts or {}).get("effective") if isinstance(counts, dict) else None, entry.get("sample_len"))
    known = [v for v in said if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return min(known) if known else None


def _check_samples(path: Path, lines: list[dict], expected: int | None) -> None:
    """An empty samples file, one cut at a line's end (fewer documents than the run scored), and one naming a
    document twice in a filter are damaged files, said as such in one line: not a metric that is no mean,
    and not a task that only the other run holds."""
    if not lines:
        raise UserError(
            f"samples file {path} is empty: it holds no record of the run's "
            f"{f'{expected} ' if expected else ''}documents (an interrupted run or an incomplete copy); copy the "
            f"whole file or rerun lm_eval with --log_samples"
        )
    seen: dict[tuple[str, str], int] = {}
    for n, s in enumerate(lines, 1):
        key = (str(s.get("filter", "none")), str(s["doc_id"]))
        if key in seen:
            raise UserError(
                f"samples file {path}: duplicate sample id/epoch: document {shorten(s['doc_id'])} (filter "
                f"{key[0]!r}) at lines {seen[key]} and {n} (a samples file of two runs joined?); a paired verdict "
                f"needs each document once"
            )
        seen[key] = n
    per_filter = {f for f, _ in seen}
    held = min(sum(1 for f, _ in seen if f == filt) for filt in per_filter)
    if expected and held < expected:
        raise UserError(
            f"samples file {path} is truncated at line {len(lines)}: it holds {held} of the {expected} documents "
            f"the run scored (an interrupted run or an incomplete copy); copy the whole file or rerun lm_eval "
            f"with --log_samples"
        )


def _lm_eval_task(data: dict, task: str, lines: list[dict]) -> list[ItemScores]:
    """Every metric of one task that its samples record per document, one ItemScores per metric,filter."""
    results = data["results"].get(task) if isinstance(data["results"].get(task), dict) else {}
    directions = (data.get("higher_is_better") or {}).get(task) or {}
    by_filter: dict[str, list[dict]] = {}
    for s in lines:
        by_filter.setdefault(str(s.get("filter", "none")), []).append(s)
    out = []
    for filt, records in by_filter.items():
        names = dict.fromkeys(n for s in records for n in (s.get("metrics") or []) if isinstance(n, str))
        items, prompts, contents, prompt_texts, fields = {}, {}, {}, {}, {}
        for s in records:
            doc = str(s["doc_id"])
            if isinstance(s.get("doc"), dict):
                fields[doc] = s["doc"]
            if isinstance(s.get("doc_hash"), str):
                items[doc] = f"{s.get('doc_hash')}:{s.get('target_hash')}"
            if isinstance(s.get("prompt_hash"), str):
                prompts[doc] = s["prompt_hash"]
            if "doc" in s:
                contents[doc] = text_hash(["doc", s["doc"], s.get("target")])
            elif s.get("arguments") is not None:
                contents[doc] = text_hash(["arguments", s["arguments"], s.get("target")])
            if (context := _context(s.get("arguments"))) is not None:
                prompt_texts[doc] = text_hash(context)
        for name in names:
            key = f"{name},{filt}"
            scores, note = {}, ""
            for s in records:
                value = as_unit_score(s.get(name))
                if value is None:
                    note = f"document {shorten(s['doc_id'])}'s {name} is {shorten(s.get(name))}, not a score in [0, 1]"
                    break
                doc_key = (str(s["doc_id"]), 1)
                if doc_key in scores:
                    note = f"names document {shorten(s['doc_id'])} twice (a samples file of two runs?)"
                    break
                scores[doc_key] = value
            reported = as_unit_score(results.get(key)) if isinstance(results.get(key), (int, float)) else None
            if not note:
                note = _not_a_mean(scores, reported, key)
            higher = directions.get(name) if isinstance(directions.get(name), bool) else None
            out.append(
                ItemScores(
                    task, key, scores, items, prompts, higher, reported, note, contents, prompt_texts, fields=fields
                )
            )
    return out


def _context(arguments: Any) -> str | None:
    """The prompt text an lm-eval sample logged: its first request's context (arg_0)."""
    if isinstance(arguments, dict) and isinstance(arguments.get("gen_args_0"), dict):
        value = arguments["gen_args_0"].get("arg_0")
    elif isinstance(arguments, list) and arguments and isinstance(arguments[0], (list, tuple)) and arguments[0]:
        value = arguments[0][0]
    else:
        value = None
    return value if isinstance(value, str) else None


def _not_a_mean(scores: Mapping[tuple[str, int], float], reported: float | None, name: str) -> str:
    """Why the items' scores do not stand for the run's metric ("" when they do): the run reports an
    aggregate that is not their mean (an F1 over the corpus, a BLEU), or none."""
    if not scores:
        return "no item scores"
    if reported is None:
        return f"the run reports no value in [0, 1] for {name} (not a mean of item scores)"
    per_item: dict[str, list[float]] = {}
    for (item, _), v in scores.items():
        per_item.setdefault(item, []).append(v)
    mean = sum(sum(v) / len(v) for v in per_item.values()) / len(per_item)
    if abs(mean - reported) > MEAN_TOLERANCE:
        return f"the run reports {name} = {reported:.6g} but its items average {mean:.6g}: not a mean of item scores"
    return ""


# -- Inspect ---------------------------------------------------------------------------------------
def _read_inspect(path: str) -> RunScores:
    tasks: list[ItemScores] = []
    models: set[str] = set()
    seen: dict[str, str] = {}  # task -> the log that held it
    files: list[str] = []
    for log_path, data, (header, samples) in _files(inspect_logs.READER, path):
        if not samples:
            raise UserError(f"{log_path} holds no samples (was it run with --no-log-samples?)")
        if twice := _duplicate_sample(log_path, data, header, samples):
            raise UserError(
                f"{log_path}: duplicate sample id/epoch: {twice} (a log joined from two runs, or edited?); a paired "
                f"verdict needs each sample once per epoch: rerun the eval or remove the copy"
            )
        models.add(escaped(str(header.eval.model)))
        _twice(path, seen, task_name(header.eval), str(log_path))
        tasks.extend(inspect_task_scores(header, samples))
        files.append(str(log_path))
    return RunScores("inspect", path, _one_model(path, models), tuple(tasks), tuple(files))


def _duplicate_sample(path: Path, data: bytes, header, samples: list) -> str:
    """ "sample X epoch E appears N times" for the first (id, epoch) a log holds twice, else "". Inspect reads a
    log's samples by the ids its header lists, so a second copy in the body is looked for in the file itself
    too: a .eval archive's sample members, a .json log's samples list."""

    def first(counts: Counter) -> Any:
        return next((k for k, c in counts.items() if c > 1), None)

    read = Counter((str(s.id), int(s.epoch)) for s in samples)
    listed = Counter(str(i) for i in header.eval.dataset.sample_ids or [])
    if twice := first(read):
        return f"sample {shorten(twice[0])} epoch {twice[1]} appears {read[twice]} times"
    if twice := first(listed):
        return f"sample {shorten(twice)} is listed {listed[twice]} times in the log's header"
    if data.startswith(b"PK"):
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = Counter(n for n in archive.namelist() if n.startswith("samples/"))
        if twice := first(members):
            return f"sample member {shorten(twice)} appears {members[twice]} times"
        return ""
    try:
        body = loads_json(decode_text(data))
    except (ValueError, Refused):
        return ""
    kept = body.get("samples") if isinstance(body, dict) else None
    held = Counter((str(x.get("id")), x.get("epoch")) for x in kept or [] if isinstance(x, dict))
    if twice := first(held):
        return f"sample {shorten(twice[0])} epoch {twice[1]} appears {held[twice]} times"
    return ""


def prompt_messages(messages: list) -> list:
    """What an Inspect model was given: the messages before its first reply (role and text)."""
    out = []
    for m in messages:
        if getattr(m, "role", None) == "assistant":
            break
        out.append([m.role, m.text])
    return out


def sample_key(input_value: Any, target: Any) -> str:
    """The hash of an Inspect sample's input and target: the same item in two logs, or a changed one."""
    dump = (
        [m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else m for m in input_value]
        if isinstance(input_value, list)
        else input_value
    )
    return text_hash([dump, target])


def inspect_task_scores(header, samples: list) -> list[ItemScores]:
    """Every scorer (and key of a scorer whose values are dicts) of one log, one ItemScores each."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    task = task_name(header.eval)
    reported = _inspect_reported(header)
    scores: dict[str, dict[tuple[str, int], float]] = {}
    notes: dict[str, str] = {}
    items: dict[str, str] = {}
    prompts: dict[str, str] = {}
    fields: dict[str, Mapping[str, Any]] = {}
    for s in samples:
        sid = str(s.id)
        items[sid] = sample_key(s.input, s.target)
        fields.setdefault(sid, s.metadata or {})  # a reference: read only where --cluster asks
        prompts.setdefault(sid, text_hash(prompt_messages(s.messages or [])))
        for scorer, score in (s.scores or {}).items():
            values = score.value if isinstance(score.value, dict) else {None: score.value}
            for key, raw in values.items():
                name = scorer if key is None else f"{scorer}/{key}"
                try:
                    v = as_unit_score(float(to_float(raw)))
                except (TypeError, ValueError):
                    v = None
                if v is None:
                    notes.setdefault(
                        name, f"sample {shorten(s.id)}'s {name} score {shorten(raw)} is not a score in [0, 1]"
                    )
                    continue
                scores.setdefault(name, {})[(sid, int(s.epoch))] = v
    stopped = frozenset(early_stopped(header))
    summary = getattr(header.results, "early_stopping", None) if stopped else None
    sentence = str(((summary.metadata or {}) if summary is not None else {}).get("sentence") or "")
    out = []
    for name in dict.fromkeys([*scores, *notes]):
        got = scores.get(name, {})
        note = notes.get(name) or _not_a_mean(got, reported.get(name), name)
        out.append(
            ItemScores(
                task,
                name,
                got,
                items,
                prompts,
                None,
                reported.get(name),
                note,
                stopped=stopped,
                stop_sentence=sentence,
                fields=fields,
            )
        )
    return out


def _inspect_reported(header) -> dict[str, float]:
    """Per scorer (or `scorer/key`), the mean-type metric the log reports for it."""
    out = {}
    for s in header.results.scores or []:
        name = s.name if s.scorer in (None, s.name) else f"{s.scorer}/{s.name}"
        for metric in inspect_logs.MEAN_METRICS:
            if metric in s.metrics:
                value = as_unit_score(s.metrics[metric].value)
                if value is not None:
                    out[name] = value
                break
    return out


# -- pairing two runs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pairing:
    """Two runs' comparisons, and what was left out of them, each with its count and why."""

    pairs: tuple[PairedScores, ...]
    notes: tuple[str, ...]  # what was not compared or not paired, and why
    counts: tuple[dict[str, Any], ...]  # per task: items paired, only in A, only in B, changed, prompts differing


def _wanted(name: str, metric: str) -> bool:
    """--metric NAME picks lm-eval's `acc` as `acc` or `acc,none`, Inspect's scorer as `match`."""
    return name in (metric, metric.split(",", 1)[0])


def _direction(task: str, metric: str, recorded: set[bool | None], flag: bool | None) -> bool | None:
    known = {r for r in recorded if r is not None}
    if len(known) > 1:
        raise UserError(f"task {task} metric {metric}: the two runs record opposite directions (higher_is_better)")
    if known and flag is not None and flag not in known:
        given = "--higher-is-better" if flag else "--lower-is-better"
        raise UserError(
            f"task {task} metric {metric}: the run records higher_is_better = {known.pop()}; {given} contradicts it"
        )
    return known.pop() if known else flag


def pair_runs(
    a: RunScores,
    b: RunScores,
    *,
    tasks: tuple[str, ...] = (),
    metrics: tuple[str, ...] = (),
    restrict: bool = False,
    prompts_may_differ: bool = False,
    higher_is_better: bool | None = None,
    cluster: str | None = None,
) -> Pairing:
    """Every task x metric both runs hold, items matched by (item id, epoch). Runs whose item sets, items or
    prompts differ are refused (one line, with the counts and the way out) unless `restrict` (only the items
    both hold unchanged, with the prompt, are paired; the counts are noted) or, for prompts alone,
    `prompts_may_differ` (paired by id anyway, noted). `cluster`: the field of each item's `doc` (lm-eval) or
    sample metadata (Inspect) that names its cluster; the comparison then reads the clusters as the draws."""
    mine_a = {(t.task, t.metric): t for t in a.tasks}
    mine_b = {(t.task, t.metric): t for t in b.tasks}
    notes, pairs, counts = [], [], []
    for name in tasks:
        if not any(t == name for t, _ in (*mine_a, *mine_b)):
            have = ", ".join(sorted({t for t, _ in (*mine_a, *mine_b)}))
            raise UserError(f"--task {name}: neither run holds it (they hold: {have})")
    for name in metrics:
        if not any(_wanted(name, m) for _, m in (*mine_a, *mine_b)):
            have = ", ".join(sorted({m for _, m in (*mine_a, *mine_b)}))
            raise UserError(f"--metric {name}: neither run records it (they record: {have})")
    keys = [
        k
        for k in dict.fromkeys([*mine_a, *mine_b])
        if (not tasks or k[0] in tasks) and (not metrics or any(_wanted(n, k[1]) for n in metrics))
    ]
    checked: dict[str, set[str]] = {}  # per task, the items paired (one check per task, shared by its metrics)
    for key in keys:
        task, metric = key
        if key not in mine_a or key not in mine_b:
            side, path = ("A", a.path) if key in mine_a else ("B", b.path)
            notes.append(f"{task} ({metric}): only in {side}'s run ({path}); not compared")
            continue
        sa, sb = mine_a[key], mine_b[key]
        if sa.note or sb.note:
            notes.append(f"{task} ({metric}): not compared: {sa.note or sb.note}")
            continue
        if task not in checked:
            kept, count, note = _match_items(task, sa, sb, restrict, prompts_may_differ)
            checked[task] = kept
            counts.append(count)
            if note:
                notes.append(note)
        keep = checked[task]
        common = sorted(k for k in sa.scores.keys() & sb.scores.keys() if k[0] in keep)
        by_item: dict[str, list[tuple[float, float]]] = {}
        for k in common:
            by_item.setdefault(k[0], []).append((sa.scores[k], sb.scores[k]))
        if not by_item:
            notes.append(f"{task} ({metric}): not compared: no item is scored in both runs")
            continue
        ids = sorted(by_item)
        direction = _direction(task, metric, {sa.higher_is_better, sb.higher_is_better}, higher_is_better)
        clusters = None if cluster is None else tuple(_cluster_of(task, i, cluster, sa, sb) for i in ids)
        pairs.append(
            PairedScores(
                task,
                metric,
                np.array([np.mean([x for x, _ in by_item[i]]) for i in ids]),
                np.array([np.mean([y for _, y in by_item[i]]) for i in ids]),
                direction,
                max(len(v) for v in by_item.values()),
                clusters,
                cluster or "",
            )
        )
    return Pairing(tuple(pairs), tuple(notes), tuple(counts))


def _cluster_of(task: str, item: str, name: str, a: ItemScores, b: ItemScores) -> str:
    """Item `item`'s cluster: its `name` field where the runs logged it (both alike where both did)."""
    found = [f[name] for f in (a.fields.get(item), b.fields.get(item)) if f is not None and name in f]
    if not found:
        logged = a.fields.get(item) or b.fields.get(item)
        where = (
            f"its logged fields are {', '.join(sorted(map(str, logged))[:8])}"
            if logged
            else "the runs log no fields for it (lm-eval: the `doc` of --log_samples; Inspect: sample metadata)"
        )
        raise UserError(f"--cluster {name}: task {task}'s item {shorten(item)} has no field {name!r}; {where}")
    if len(found) == 2 and found[0] != found[1]:
        raise UserError(
            f"--cluster {name}: task {task}'s item {shorten(item)} is in cluster {shorten(found[0])} in A's run and "
            f"{shorten(found[1])} in B's"
        )
    value = found[0]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _match_items(
    task: str, a: ItemScores, b: ItemScores, restrict: bool, prompts_may_differ: bool
) -> tuple[set[str], dict[str, Any], str]:
    """(the items of `task` to pair, their counts, a note): refused unless both runs hold the same (item,
    epoch) records of the same items with the same prompts, or `restrict` / `prompts_may_differ` says what to
    do with the rest."""
    # records a run's early stopping stopped are not missing: that run ran the others only
    only_a = sorted(a.scores.keys() - b.scores.keys() - b.stopped)
    only_b = sorted(b.scores.keys() - a.scores.keys() - a.stopped)
    both = {i for i, _ in a.scores.keys() & b.scores.keys()}
    changed = sorted(i for i in both if _differs(i, a.items, b.items, a.contents, b.contents))
    prompts = sorted(
        i for i in both if i not in changed and _differs(i, a.prompts, b.prompts, a.prompt_texts, b.prompt_texts)
    )
    count = {
        "task": task,
        "only_a": len(only_a),
        "only_b": len(only_b),
        "changed": len(changed),
        "prompts_differ": len(prompts),
    }
    drop = set(changed) | (set() if prompts_may_differ else set(prompts))
    keep = both - drop
    count["paired_items"] = len(keep)
    problems = []
    if only_a or only_b:
        example = (only_a or only_b)[0]
        problems.append(
            f"{len(only_a)} item-epoch records only in A's run and {len(only_b)} only in B's (e.g. item "
            f"{shorten(example[0])} epoch {example[1]})"
        )
    if changed:
        problems.append(
            f"{len(changed)} of {len(both)} items whose content or target differs (e.g. {shorten(changed[0])})"
            + _by_content(changed, a, b)
        )
    if prompts and not prompts_may_differ:
        problems.append(
            f"{len(prompts)} of {len(both)} items given a different prompt (e.g. {shorten(prompts[0])}: a chat "
            f"template, few-shot examples or another prompt template)"
        )
    note = ""
    if problems and not restrict:
        way_out = f"pass --restrict to pair only the {len(keep)} items that match"
        if prompts and not prompts_may_differ:
            way_out += ", or --prompts-may-differ to pair items by id whatever their prompts"
        raise UserError(f"task {task}: the runs do not hold the same items: {'; '.join(problems)}; {way_out}")
    if problems:
        note = f"{task}: {'; '.join(problems)}: left out (--restrict); {len(keep)} items paired"
    for who, run, other in (("A", a, b), ("B", b, a)):
        cut = len(other.scores.keys() - run.scores.keys() & run.stopped)
        if cut:
            decision = f"; its early stopping's decision (anytime-valid, in the log): {run.stop_sentence}"
            note = (note + "; " if note else f"{task}: ") + (
                f"{who}'s eval was stopped early ({cut} of the other run's item-epoch records were never run by it): "
                f"paired on the items it ran. The rule that stopped it looked at these items, so the fixed-n test "
                f"here is not valid at that data-chosen stop{decision if run.stop_sentence else ''}"
            )
    if prompts and prompts_may_differ:
        note = (note + "; " if note else f"{task}: ") + (
            f"{len(prompts)} of {len(both)} items were given different prompts and are paired by id "
            f"(--prompts-may-differ): the difference includes the prompts'"
        )
    return keep, count, note


def _differs(item: str, hashes_a, hashes_b, contents_a, contents_b) -> bool:
    """Whether an item differs between two runs: by the hashes the runs recorded where both did, else by the
    content both logged (lm-eval's `doc` field, the prompt text); an item neither can be compared by is kept."""
    if item in hashes_a and item in hashes_b:
        return hashes_a[item] != hashes_b[item]
    if item in contents_a and item in contents_b:
        return contents_a[item] != contents_b[item]
    return False


def _by_content(changed: list[str], a: ItemScores, b: ItemScores) -> str:
    """What a change found by content (no recorded hash) is: the words saying so and, where B holds A's item
    under another id, the shift ("A's 0 is B's 1"): documents paired to the wrong documents, not changed."""
    read = [i for i in changed if not (i in a.items and i in b.items)]
    if not read:
        return ""
    out = f" ({len(read)} compared by the logged `doc` field or arguments: the runs record no doc_hash)"
    where_b: dict[str, str] = {}
    for item, content in b.contents.items():
        where_b.setdefault(content, item)
    moved = [(i, where_b[a.contents[i]]) for i in read if a.contents.get(i) in where_b]
    if moved:
        first_a, first_b = moved[0]
        out += (
            f"; {len(moved)} of them are in B's run under another id (A's {shorten(first_a)} is B's {shorten(first_b)}"
        )
        shifts = {int(j) - int(i) for i, j in moved if i.lstrip("-").isdigit() and j.lstrip("-").isdigit()}
        out += f": ids shifted by {shifts.pop():+d})" if len(shifts) == 1 else ")"
    return out
