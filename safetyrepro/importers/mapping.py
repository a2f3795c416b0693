"""From what a run recorded to the grid's axes (docs/importing.md, "The axes"): pure functions, plus the mapping
file's parser. A task that neither SafetyRepro's own task names nor the mapping file place is listed as unmapped,
never guessed; what differs from SafetyRepro's way of running a template is written into the template's name, so
that two runs that prompted differently never share a configuration id."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_bytes
from safetyrepro.limits import MAX_CONFIG_BYTES, Refused, label_problem, load_yaml, read_capped
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS

from .common import DecodingSpec, bad_file, short_hash, token

SCORINGS = ("free_form", "logprob")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
AXIS_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=:-]*")  # a template/decoding value: no '/', no spaces
LM_EVAL_TASK = re.compile(r"safetyrepro_(?P<benchmark>.+)_t(?P<k>[0-9]+)(?P<gen>_gen)?")
INSPECT_TASK = re.compile(r"safetyrepro/(?P<benchmark>[A-Za-z0-9_]+)")
TASK_KEYS = {"match", "benchmark", "template", "metric", "scoring", "item_id", "stress", "shots_arg"}
MODEL_KEYS = {"match", "label"}


@dataclass(frozen=True)
class Placement:
    """Where a task lands: benchmark, base template, and how to read it."""

    benchmark: str
    template: str
    safetyrepro: bool  # one of SafetyRepro's own tasks
    stress: bool = False
    metric: str | None = None
    scoring: str | None = None
    item_id: str | None = None
    shots_arg: str | None = None


@dataclass(frozen=True)
class TaskRule:
    """A mapping file's task entry: the tasks its pattern matches land where `placement` says (its benchmark
    and template may refer to the match's groups)."""

    pattern: re.Pattern
    placement: Placement


@dataclass(frozen=True)
class Mapping:
    tasks: tuple[TaskRule, ...] = ()
    models: tuple[tuple[re.Pattern, str], ...] = ()  # each `models` entry's match and label
    path: str | None = None
    sha256: str | None = None

    def task_rule(self, task: str) -> TaskRule | None:
        return next((r for r in self.tasks if r.pattern.fullmatch(task)), None)

    def checked_label(self, default: str, source: str, field: str) -> str:
        """The grid label of a model the run recorded as `default` (in `field`), refused when it cannot be one."""
        label = next((label for pattern, label in self.models if pattern.fullmatch(default)), default)
        if problem := label_problem(label):
            raise bad_file(source, f"field {field}: {problem} (a `models` entry of the mapping file gives one)")
        return label


def _compile(pattern: Any, where: str) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise UserError(f"{where}: 'match' must be a regular expression (a string)")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise UserError(f"{where}: 'match' {pattern!r} is not a regular expression ({e})") from None


def parse_mapping(text: bytes, path: str = "<mapping>") -> Mapping:
    """A mapping file's contents, checked: every error names the entry and the key."""
    raw = load_yaml(text, f"mapping file {path}") or {}
    if not isinstance(raw, dict) or set(raw) - {"tasks", "models"}:
        extra = sorted(set(raw) - {"tasks", "models"}) if isinstance(raw, dict) else []
        raise UserError(
            f"mapping file {path} must be a mapping with the keys tasks and models"
            + (f" (unknown key {extra[0]!r})" if extra else "")
        )
    tasks, models = [], []
    for i, entry in enumerate(raw.get("tasks") or [], 1):
        where = f"mapping file {path}, tasks entry {i}"
        if not isinstance(entry, dict):
            raise UserError(f"{where} must be a mapping with match, benchmark and template")
        if unknown := sorted(set(entry) - TASK_KEYS):
            raise UserError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(TASK_KEYS))}")
        for key in ("benchmark", "template"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise UserError(f"{where} lacks {key!r} (every task entry says its benchmark and template)")
        if entry.get("scoring") is not None and entry["scoring"] not in SCORINGS:
            raise UserError(f"{where}: scoring {entry['scoring']!r}; allowed: {', '.join(SCORINGS)}")
        for key in ("metric", "item_id", "shots_arg"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise UserError(f"{where}: {key!r} must be a string")
        if not isinstance(entry.get("stress", False), bool):
            raise UserError(f"{where}: 'stress' must be true or false")
        optional = {k: entry[k] for k in TASK_KEYS - {"match", "benchmark", "template"} if entry.get(k) is not None}
        placement = Placement(entry["benchmark"].strip(), entry["template"].strip(), False, **optional)
        tasks.append(TaskRule(_compile(entry.get("match"), where), placement))
    for i, entry in enumerate(raw.get("models") or [], 1):
        where = f"mapping file {path}, models entry {i}"
        if not isinstance(entry, dict) or set(entry) - MODEL_KEYS or not isinstance(entry.get("label"), str):
            raise UserError(f"{where} must be a mapping with match and label")
        label = entry["label"].strip()
        if not label:
            raise UserError(f"{where}: 'label' is empty")
        if problem := label_problem(label, "'label'"):
            raise UserError(f"{where}: {problem}")
        models.append((_compile(entry.get("match"), where), label))
    return Mapping(tuple(tasks), tuple(models), path, sha256_bytes(text))


def load_mapping(path: str | None) -> Mapping:
    if path is None:
        return Mapping()
    try:
        text = read_capped(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES")
    except OSError as e:
        raise UserError(f"cannot read mapping file {path}: {e.strerror}") from None
    except Refused as e:
        raise UserError(f"mapping file {path} {e.reason}") from None
    return parse_mapping(text, path)


def place_task(task: str, mapping: Mapping, package: str, task_args: dict | None = None) -> Placement | str:
    """Where `task` lands, or the reason it cannot be placed (the run is then listed as unmapped)."""
    from safetyrepro.tasks.envelope import default_rules

    rules = default_rules()  # SafetyRepro's templates and its stress-tier ones, as the packaged rules file lists them
    sr_templates, sr_stress = rules.axes["template"], rules.stress.get("template", ())
    rule = mapping.task_rule(task)
    if rule is not None and (m := rule.pattern.fullmatch(task)):
        try:
            benchmark, template = m.expand(rule.placement.benchmark), m.expand(rule.placement.template)
        except (re.error, IndexError) as e:
            return f"the mapping entry for {task!r} refers to a group its pattern lacks ({e})"
        if not NAME.fullmatch(benchmark):
            return f"the mapping gives task {task!r} the benchmark {benchmark!r}, which is not a plain name"
        if not AXIS_VALUE.fullmatch(template) or "+" in template:
            return (
                f"the mapping gives task {task!r} the template {template!r}; a template is letters, digits and "
                "'_.=:-' ('+' is kept for the settings the importer adds)"
            )
        stress = rule.placement.stress or (benchmark in BENCHMARKS and template in sr_stress)
        return replace(rule.placement, benchmark=benchmark, template=template, stress=stress)
    if package == "lm-eval":
        m = LM_EVAL_TASK.fullmatch(task)
        if m and m["benchmark"] in BENCHMARKS and f"T{m['k']}" in sr_templates:
            template, scoring = f"T{m['k']}", "free_form" if m["gen"] else "logprob"
            return Placement(m["benchmark"], template, True, template in sr_stress, scoring=scoring, item_id="id")
    else:
        m = INSPECT_TASK.fullmatch(task)
        if m and m["benchmark"] in BENCHMARKS:
            template = str((task_args or {}).get("template", "T1"))
            if template not in sr_templates:
                return f"task {task!r} ran with template {template!r}, which SafetyRepro does not define"
            return Placement(m["benchmark"], template, True, template in sr_stress)
    return (
        f"task {task!r} is not one of SafetyRepro's task names and no entry of the mapping file matches it: "
        "say its benchmark and template with --mapping (docs/importing.md)"
    )


# -- decoding ---------------------------------------------------------------------------------------
def decoding_spec(
    temperature: float | None, top_p: float | None, do_sample: bool | None, rules, provider_default: bool = False
) -> DecodingSpec:
    """The grid's decoding value for recorded sampling settings (docs/importing.md, "The axes"). Without any
    recorded temperature, `provider-default`, unless the caller knows the provider decodes greedily then."""
    if temperature is None and provider_default:
        return DecodingSpec("provider-default", 1.0, 1.0, True, recorded=False)
    t = float(temperature or 0.0)
    if t <= 0 or do_sample is False:  # nothing sampled
        return DecodingSpec("greedy", 0.0, 1.0, False)
    p = 1.0 if top_p is None else float(top_p)
    for d in rules.decodings.values():
        if d.do_sample and abs(d.temperature - t) < 1e-9 and abs(d.top_p - p) < 1e-9:
            return DecodingSpec(d.name, t, p, True)
    return DecodingSpec(f"t{t:g}-p{p:g}", t, p, True)  # 0.3 -> "t0.3", 1.0 -> "p1": read like the settings


def run_decoding(
    scoring: str,
    rules,
    temperature: float | None = None,
    top_p: float | None = None,
    do_sample: bool | None = None,
    provider_default: bool = False,
    settings: dict[str, Any] | None = None,
) -> DecodingSpec:
    """A run's decoding: greedy for likelihood scoring (it samples nothing: the envelope's logprob cells are
    greedy), else `decoding_spec`'s name followed by the other recorded settings that change an output."""
    if scoring == "logprob":
        return decoding_spec(0.0, None, False, rules)
    spec = decoding_spec(temperature, top_p, do_sample, rules, provider_default)
    return replace(spec, name=with_settings(spec.name, settings or {}))


def with_settings(name: str, settings: dict[str, Any]) -> str:
    """`name` followed by `+key=value` for each setting, in key order (values shortened by `token`)."""
    return name + "".join(f"+{k}={token(v)}" if v is not True else f"+{k}" for k, v in sorted(settings.items()))


def decorated_template(
    base: str,
    *,
    chat_applied: bool | None,
    model_has_chat: bool | None,
    system_text: str | None,
    fewshot_as_multiturn: bool | None,
    shots: int,
    args: dict[str, Any] | None = None,
) -> str:
    """The template's grid value: the base template, plus what the run did differently from SafetyRepro's own
    way of rendering it and task arguments that are not axes (docs/importing.md, "The axes")."""
    extra: dict[str, Any] = {}
    if chat_applied is False and model_has_chat is not False:
        extra["nochat"] = True
    if system_text:
        extra["sys"] = short_hash(system_text)
    if chat_applied and shots > 0 and fewshot_as_multiturn is False:
        extra["oneturn"] = True
    extra.update({token(k): v for k, v in sorted((args or {}).items())})
    return with_settings(base, extra)


def model_label(kind: str, args: dict[str, Any], recorded_name: str | None) -> str:
    """The default grid label of an lm-eval model: the embedded name for `--model safetyrepro`
    (the sweep's label), else `<model>:<pretrained or model>` with the revision and adapter, which
    change the weights; arguments that do not (batch size, device, dtype: that is the precision
    column) are left out."""
    if kind == "safetyrepro" and args.get("model"):
        return str(args["model"])
    name = args.get("pretrained") or args.get("model") or args.get("path") or recorded_name or "?"
    label = f"{kind}:{name}"
    if args.get("revision"):
        label += f"@{args['revision']}"
    if args.get("peft"):
        label += f"+peft:{args['peft']}"
    return label


def parse_model_args(value: Any) -> dict[str, Any]:
    """lm-eval records model_args as the string given on the command line or as a dict."""
    if isinstance(value, dict):
        return dict(value)
    pairs = (part.split("=", 1) for part in str(value or "").split(",") if "=" in part)
    return {k.strip(): v.strip() for k, v in pairs}


def truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")
