"""The envelope of a task SafetyRepro does not define (docs/any_task.md): the choices its harness exposes without
rewriting the task. Pure: the task's facts come in (`TaskFacts`, read by the package's own module), the envelope's
configurations go out; a rules file (YAML, in the style of the five benchmarks' envelope.yaml) reads and writes it.

lm-eval: few-shot count, chat template on/off (few-shot as multi-turn with it), a system instruction (none or a
named one), and for generated answers the decoding (greedy, or sampled with seeds). Inspect: the task's own solver,
or with a system message or chain of thought before it, and the decoding; `-T` arguments a user lists."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_bytes

PACKAGES = ("lm-eval", "inspect")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# the named system instructions a default envelope offers (a rules file may name others)
SYSTEMS: dict[str, str | None] = {
    "none": None,
    "helpful": "You are a helpful assistant.",
    "careful": "Think about the question carefully, then answer it accurately.",
    "concise": "Answer with the answer alone.",
}
DECODINGS: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 0.0, "top_p": 1.0, "do_sample": False},
    "sampled": {"temperature": 0.7, "top_p": 0.9, "do_sample": True},
}
SOLVERS = ("own", "cot")  # Inspect: the task's solver, or chain of thought before it
AXES = ("shots", "chat_template", "system", "decoding", "solver", "args", "template", "epochs", "scoring")
# lm-eval: the task's own scoring, or a multiple-choice task's choices generated and matched (a generate_until twin,
# derived as a template is: lm-eval 0.4.13 registers no task@format variants)
SCORINGS = ("own", "generate_until")
# the lm-eval task-YAML keys a declared template may override: how a document becomes a prompt and its target, and
# nothing that changes the data, the metric or the scoring (those would be another task, not another template)
TEMPLATE_KEYS = (
    "doc_to_text",
    "doc_to_target",
    "doc_to_choice",
    "target_delimiter",
    "fewshot_delimiter",
    "description",
    "gen_prefix",
)
OWN_TEMPLATE = "own"  # the task's own template; "task" is its name in the grid, so neither names a declared one
LIKELIHOOD = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")


@dataclass(frozen=True)
class TaskRef:
    """`lm-eval:<task>` (a registered name, or a task YAML) or `inspect:<task>` (a registered name, or
    `file.py[@task]`)."""

    package: str
    name: str

    @classmethod
    def parse(cls, text: str) -> TaskRef:
        package, sep, name = str(text).partition(":")
        if not sep and str(text).endswith((".yaml", ".yml")):
            package, name = "lm-eval", str(text)
        if package not in PACKAGES or not name.strip():
            raise UserError(
                f"--task {text!r}: say the package and the task, lm-eval:<task name or YAML file> or "
                "inspect:<task name or file.py[@task]> (docs/any_task.md)"
            )
        return cls(package, name.strip())

    def __str__(self) -> str:
        return f"{self.package}:{self.name}"


@dataclass(frozen=True)
class TaskFacts:
    """What a default envelope needs to know of a task: how it scores (lm-eval's output_type; Inspect tasks
    generate), and whether it has examples to draw few-shot demonstrations from."""

    name: str  # the task's own name, as its package records it
    output_type: str
    fewshot_source: bool
    items: int | None = None

    @property
    def generates(self) -> bool:
        return self.output_type not in LIKELIHOOD


@dataclass(frozen=True)
class TaskConfig:
    """One configuration of the envelope: every axis set."""

    shots: int = 0
    chat_template: bool = False
    system: str = "none"
    decoding: str = "greedy"
    solver: str = "own"
    args: tuple[tuple[str, Any], ...] = ()  # Inspect's -T arguments
    template: str = OWN_TEMPLATE  # lm-eval: the task's own template or a declared variant
    epochs: int = 1  # Inspect: each sample run this many times (its score the mean over them)
    scoring: str = "own"  # lm-eval: the task's own, or generate_until (a multiple-choice task's generated twin)

    @property
    def run_id(self) -> str:
        """The folder name of its runs: every axis, readable (the defaults of the newer axes left out, so that
        earlier sweeps' folders keep their names)."""
        parts = [f"{self.shots}shot", "chat" if self.chat_template else "nochat", f"sys-{self.system}", self.decoding]
        if self.solver != "own":
            parts.append(f"solver-{self.solver}")
        if self.template != OWN_TEMPLATE:
            parts.append(f"tpl-{self.template}")
        if self.epochs != 1:
            parts.append(f"epochs-{self.epochs}")
        if self.scoring != "own":
            parts.append(f"scoring-{self.scoring}")
        parts += [f"{k}-{v}" for k, v in self.args]
        return "_".join(re.sub(r"[^A-Za-z0-9.=-]", "-", str(p)) for p in parts)


@dataclass(frozen=True)
class TaskEnvelope:
    """The axes' values, the named system texts and decodings, the seeds of sampled decodings, the stress tier."""

    task: TaskRef
    shots: tuple[int, ...]
    chat_template: tuple[bool, ...]
    system: tuple[str, ...]
    decoding: tuple[str, ...]
    solver: tuple[str, ...] = ("own",)
    args: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    systems: dict[str, str | None] = field(default_factory=lambda: dict(SYSTEMS))
    decodings: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DECODINGS))
    sampling_seeds: tuple[int, ...] = (1, 2)
    stress: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    template: tuple[str, ...] = (OWN_TEMPLATE,)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)  # declared name -> task-YAML keys it sets
    epochs: tuple[int, ...] = (1,)
    scoring: tuple[str, ...] = ("own",)

    def __post_init__(self) -> None:
        check_templates(self.templates)
        for name in self.template:
            if name != OWN_TEMPLATE and name not in self.templates:
                raise UserError(f"envelope: template {name!r} is not declared under `templates` (own: the task's)")
        if not self.template:
            raise UserError("envelope: axes.template must list own and/or declared templates")
        if unknown_scoring := [s for s in self.scoring if s not in SCORINGS]:
            raise UserError(f"envelope: scoring {unknown_scoring[0]!r}; known: {', '.join(SCORINGS)}")
        if self.task.package == "inspect" and self.scoring != ("own",):
            raise UserError("envelope: scoring is an lm-eval task's axis; an Inspect task's scorer is its own")
        if not self.epochs or any(k < 1 for k in self.epochs):
            raise UserError("envelope: epochs must be one or more counts >= 1")
        for name in self.system:
            if name not in self.systems:
                raise UserError(f"envelope: system {name!r} has no text under `systems` (none: null for no text)")
        for name in self.decoding:
            if name not in self.decodings:
                raise UserError(f"envelope: decoding {name!r} is not defined under `decodings`")
        if bad := [s for s in self.solver if s not in SOLVERS]:
            raise UserError(f"envelope: solver {bad[0]!r}; known: {', '.join(SOLVERS)}")
        if any(k < 0 for k in self.shots) or not self.shots:
            raise UserError("envelope: shots must be one or more counts >= 0")
        # an axis the package does not run would give runs that differ in name only
        if self.task.package == "lm-eval" and (self.solver != ("own",) or self.args):
            raise UserError(
                "envelope: solver and args are an Inspect task's axes; an lm-eval task's are shots, chat_template, "
                "system and decoding"
            )
        if self.task.package == "lm-eval" and self.epochs != (1,):
            raise UserError(
                "envelope: epochs is an Inspect task's axis; an lm-eval task runs each document once (its "
                "generated answers' seeds are the decoding's sampling_seeds)"
            )
        if self.task.package == "inspect" and (self.template != (OWN_TEMPLATE,) or self.templates):
            raise UserError(
                "envelope: template and templates are an lm-eval task's (task-YAML keys over the task's own); an "
                "Inspect task's prompt is its solver's: axes.solver or a -T argument of the task"
            )
        if self.task.package == "inspect" and (self.shots != (0,) or self.chat_template != (False,)):
            raise UserError(
                "envelope: shots and chat_template are an lm-eval task's axes; an Inspect task's are system, solver, "
                "decoding and args (a few-shot count the task takes is one of its -T arguments)"
            )

    def configs(self) -> list[TaskConfig]:
        """Every configuration, in axis order: chat's few-shot as multi-turn, and one run per seed where sampled."""
        arg_names = sorted(self.args)
        out = []
        for scoring, template, epochs, shots, chat, system, decoding, solver, *values in itertools.product(
            self.scoring,
            self.template,
            self.epochs,
            self.shots,
            self.chat_template,
            self.system,
            self.decoding,
            self.solver,
            *(self.args[a] for a in arg_names),
        ):
            args = tuple(zip(arg_names, values, strict=True))
            out.append(TaskConfig(shots, chat, system, decoding, solver, args, template, epochs, scoring))
        return out

    def seeds(self, cfg: TaskConfig) -> tuple[int, ...]:
        return self.sampling_seeds if self.decodings[cfg.decoding].get("do_sample") else (0,)

    def tier(self, cfg: TaskConfig) -> str:
        values = {"shots": cfg.shots, "chat_template": cfg.chat_template, "system": cfg.system}
        values |= {"decoding": cfg.decoding, "solver": cfg.solver, "template": cfg.template, "epochs": cfg.epochs}
        values["scoring"] = cfg.scoring
        stressed = any(values.get(axis) in vals for axis, vals in self.stress.items())
        return "stress" if stressed else "core"

    def to_dict(self) -> dict[str, Any]:
        axes: dict[str, Any] = {
            "shots": list(self.shots),
            "chat_template": list(self.chat_template),
            "system": list(self.system),
            "decoding": list(self.decoding),
        }
        if self.task.package == "inspect":
            axes["solver"] = list(self.solver)
            axes.pop("chat_template")
        if self.args:
            axes["args"] = {k: list(v) for k, v in self.args.items()}
        # the newer axes only where they are used: an envelope without them prints (and hashes) as it always did
        if self.template != (OWN_TEMPLATE,) or self.templates:
            axes["template"] = list(self.template)
        if self.epochs != (1,):
            axes["epochs"] = list(self.epochs)
        if self.scoring != ("own",):
            axes["scoring"] = list(self.scoring)
        out: dict[str, Any] = {
            "version": 1,
            "task": str(self.task),
            "axes": axes,
            "systems": {k: self.systems[k] for k in self.system},
            "decodings": {k: dict(self.decodings[k]) for k in self.decoding},
            "sampling_seeds": list(self.sampling_seeds),
            "stress": {k: list(v) for k, v in self.stress.items()},
        }
        if self.templates:
            out["templates"] = {k: dict(v) for k, v in self.templates.items()}
        return out

    def text(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True, default_flow_style=None)

    @property
    def sha256(self) -> str:
        return sha256_bytes(self.text().encode())


def check_templates(templates: Any, where: str = "envelope") -> None:
    """Declared templates: plain names (not own or task) mapping a few known lm-eval prompt keys to their values;
    every error names the template and the key."""
    if not isinstance(templates, dict):
        raise UserError(f"{where}: templates must map each template's name to the task-YAML keys it sets")
    for name, keys in templates.items():
        if not isinstance(name, str) or not NAME.fullmatch(name) or name in (OWN_TEMPLATE, "task", *SCORINGS):
            raise UserError(
                f"{where}: template {name!r} is not a plain name (letters, digits, _.-; "
                "not own, task or generate_until)"
            )
        if not isinstance(keys, dict) or not keys:
            raise UserError(f"{where}: template {name!r} must set one or more of {', '.join(TEMPLATE_KEYS)}")
        if unknown := sorted(str(k) for k in keys if k not in TEMPLATE_KEYS):
            raise UserError(
                f"{where}: template {name!r}: unknown key {unknown[0]!r}; a template sets lm-eval's prompt keys "
                f"{', '.join(TEMPLATE_KEYS)}"
            )
        for key, value in keys.items():
            text_only = key not in ("doc_to_choice", "doc_to_target")
            ok = isinstance(value, str) or (not text_only and isinstance(value, (int, list, dict)))
            if not ok or isinstance(value, bool):
                raise UserError(
                    f"{where}: template {name!r}: {key} must be "
                    + ("text" if text_only else "text, a list or a number")
                )


def default_envelope(task: TaskRef, facts: TaskFacts) -> TaskEnvelope:
    """The envelope a task gets without a rules file: 12 configurations for likelihood scoring (0, 1 or 3
    shots x chat template off/on x no system instruction or a helpful one), 24 when the answer is generated
    (x greedy or sampled, two seeds); a task without examples to draw shots from: 0 shots x chat off/on x four
    system texts (8, or 16 generated). Inspect tasks: no system message or one of two x the task's solver alone
    or after chain of thought x the decodings (12). Sampling and chain of thought are the stress tier."""
    shots = (0, 1, 3) if facts.fewshot_source else (0,)
    decoding = ("greedy", "sampled") if facts.generates else ("greedy",)
    stress: dict[str, tuple[Any, ...]] = {"decoding": ("sampled",)} if facts.generates else {}
    if task.package == "inspect":  # a system message (none or one of two) x the solver x the decoding: 12
        three: tuple[str, ...] = ("none", "helpful", "careful")
        return TaskEnvelope(
            task, (0,), (False,), three, decoding, solver=SOLVERS, stress={**stress, "solver": ("cot",)}
        )
    if not facts.fewshot_source:  # 2 x 4 (x 2): more system texts make up for the missing shot counts
        four: tuple[str, ...] = ("none", "helpful", "careful", "concise")
        return TaskEnvelope(task, shots, (False, True), four, decoding, stress=stress)
    return TaskEnvelope(task, shots, (False, True), ("none", "helpful"), decoding, stress=stress)


def _tuple(raw: Any, where: str, kind: type) -> tuple:
    values = raw if isinstance(raw, list) else [raw]
    ok = all(isinstance(v, bool) if kind is bool else isinstance(v, kind) and not isinstance(v, bool) for v in values)
    if not values or not ok:
        raise UserError(f"envelope: {where} must be a list of {kind.__name__} values")
    return tuple(values)


def parse_envelope(text: str | bytes, where: str = "the envelope file") -> TaskEnvelope:
    """A rules file as `envelope --task ... --out FILE` writes it (edit its values; every error names the key)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UserError(f"{where} is not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("axes"), dict) or "task" not in raw:
        raise UserError(f"{where} must be a mapping with task and axes (safetyrepro envelope --task ... writes one)")
    unknown = set(raw) - {"version", "task", "axes", "systems", "decodings", "sampling_seeds", "stress", "templates"}
    if unknown or set(raw["axes"]) - set(AXES):
        raise UserError(f"{where}: unknown key {sorted(unknown or set(raw['axes']) - set(AXES))[0]!r}")
    axes, task = raw["axes"], TaskRef.parse(str(raw["task"]))
    systems = {**SYSTEMS, **(raw.get("systems") or {})}
    decodings = {**DECODINGS, **(raw.get("decodings") or {})}
    for name, d in decodings.items():
        if not NAME.fullmatch(str(name)) or not isinstance(d, dict) or "temperature" not in d:
            raise UserError(f"{where}: decoding {name!r} needs temperature (and top_p, do_sample)")
        d.setdefault("top_p", 1.0)
        d.setdefault("do_sample", float(d["temperature"]) > 0)
    for name in systems:
        if not NAME.fullmatch(str(name)):
            raise UserError(f"{where}: system {name!r} is not a plain name (letters, digits, _.-)")
    args = axes.get("args") or {}
    if not isinstance(args, dict):
        raise UserError(f"{where}: axes.args must map each -T argument to its values")
    return TaskEnvelope(
        task,
        _tuple(axes.get("shots", [0]), "axes.shots", int),
        _tuple(axes.get("chat_template", [False]), "axes.chat_template", bool),
        tuple(str(s) for s in _tuple(axes.get("system", ["none"]), "axes.system", str)),
        tuple(str(s) for s in _tuple(axes.get("decoding", ["greedy"]), "axes.decoding", str)),
        tuple(str(s) for s in _tuple(axes.get("solver", ["own"]), "axes.solver", str)),
        {str(k): tuple(v if isinstance(v, list) else [v]) for k, v in args.items()},
        systems,
        decodings,
        _tuple(raw.get("sampling_seeds", [1, 2]), "sampling_seeds", int),
        {str(k): tuple(v if isinstance(v, list) else [v]) for k, v in (raw.get("stress") or {}).items()},
        tuple(str(s) for s in _tuple(axes.get("template", [OWN_TEMPLATE]), "axes.template", str)),
        _templates(raw.get("templates"), where),
        _tuple(axes.get("epochs", [1]), "axes.epochs", int),
        tuple(str(s) for s in _tuple(axes.get("scoring", ["own"]), "axes.scoring", str)),
    )


def _templates(raw: Any, where: str) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    check_templates(raw, where)
    return {str(k): dict(v) for k, v in raw.items()}
