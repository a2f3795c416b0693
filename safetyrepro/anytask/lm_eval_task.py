"""An lm-eval task of the user's choosing, through lm-eval's public API only (TaskManager, get_task_dict,
simple_evaluate, EvaluationTracker): its facts for a default envelope, and one run of one configuration and seed
written as `lm_eval --output_path DIR --log_samples` writes it, which `safetyrepro import lm-eval` then reads."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from safetyrepro.compat.lm_eval import no_request_building_bar, quiet_logs
from safetyrepro.errors import UserError

from .envelope import OWN_TEMPLATE, TaskConfig, TaskEnvelope, TaskFacts, TaskRef
from .generated import ANSWER, bound, module_text

VARIANT_SEP = "__"  # a declared template's task is `<task>__<template>`
JINJA_ONE = re.compile(r"\{\{(?P<expr>(?:(?!\{\{|\}\}).)+)\}\}", re.DOTALL)  # one {{ expression }}, nothing else
FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a generated answer matches its choice's text (case, punctuation and spaces aside), reported as `acc` as the
# likelihood scoring's is (the importer keeps runs of one benchmark that report different metrics apart), and whether
# it names a choice at all as `parse_rate` (the importer's read flag)
GENERATED_METRICS = ("acc", "parse_rate")
GENERATED_METRIC_KEY = "acc,none"  # lm-eval's key of that metric under its default filter
TASK_LINE = re.compile(r"^task:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


def _task_name(path: Path) -> str | None:
    """The `task:` of a task YAML (lm-eval's `!function` tags are not plain YAML: then its line)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise UserError(f"--task lm-eval:{path}: cannot read it: {e.strerror}") from None
    try:
        raw = yaml.safe_load(text)
        return str(raw["task"]) if isinstance(raw, dict) and raw.get("task") else None
    except yaml.YAMLError:
        found = TASK_LINE.search(text)
        return found.group(1) if found else None


@dataclass
class LmEvalTask:
    """The task's name as lm-eval knows it and the TaskManager that finds it (loaded once)."""

    name: str
    manager: Any
    _facts: TaskFacts | None = None
    paths: tuple[str, ...] = ()  # the folders searched besides lm-eval's own (a task file's, --include_path)
    defaults: bool = True  # lm-eval's own tasks searched too

    @classmethod
    def open(cls, ref: TaskRef, include_path: str | None = None) -> LmEvalTask:
        from lm_eval.tasks import TaskManager

        quiet_logs()
        paths = [include_path] if include_path else []
        name, defaults = ref.name, True
        if ref.name.endswith((".yaml", ".yml")):  # a task file: its folder is searched, lm-eval's 14,000 are not
            path = Path(ref.name)
            found = _task_name(path)
            if found is None:
                raise UserError(f"--task {ref}: {path} has no `task:` key (an lm-eval task YAML names its task)")
            name, defaults = found, False
            paths.insert(0, str(path.resolve().parent))
        manager = TaskManager(include_path=paths or None, include_defaults=defaults)
        if name not in manager.all_tasks:
            raise UserError(
                f"--task {ref}: lm-eval knows no task {name!r}"
                + (" in the folders given (--include_path)" if not defaults else " (lm_eval --tasks list names them)")
            )
        return cls(name, manager, paths=tuple(paths), defaults=defaults)

    def yaml_path(self) -> Path:
        """The task's own YAML file, which a declared template's YAML includes; a task lm-eval builds in Python,
        or one defined inside another file's task list, has none to include."""
        entry = self.manager.task_index.get(self.name)
        path = getattr(entry, "yaml_path", None)
        if path is None or str(path) == "-1" or _task_name(Path(path)) != self.name:
            raise UserError(
                f"lm-eval task {self.name!r} has no task YAML of its own to include: a declared template needs one "
                "(write the task as a YAML file and pass it as --task lm-eval:FILE.yaml)"
            )
        return Path(path).resolve()

    def with_templates(self, folder: Path) -> LmEvalTask:
        """The same task found by a TaskManager that also searches `folder`, where the declared templates' YAMLs
        are (written by the sweep): one manager for the task and all its variants."""
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_path=[*self.paths, str(folder)], include_defaults=self.defaults)
        return LmEvalTask(self.name, manager, self._facts, (*self.paths, str(folder)), self.defaults)

    def variant(self, template: str, scoring: str = "own") -> LmEvalTask:
        """The task as a declared template runs it (`<task>__<template>`, found by this task's manager), its facts
        the task's own (a template changes the prompt, not the scoring), or as its generated twin scores it."""
        if template == OWN_TEMPLATE and scoring == "own":
            return self
        name = variant_name(self.name, template, scoring)
        if name not in self.manager.all_tasks:
            raise UserError(f"lm-eval finds no task {name!r}: the variant's YAML was not written or not indexed")
        facts = self.facts()
        if scoring != "own":
            facts = TaskFacts(name, scoring, facts.fewshot_source, facts.items)
        return LmEvalTask(name, self.manager, facts, self.paths, self.defaults)

    def task_object(self):
        import datasets

        datasets.disable_progress_bars()  # a split's bar per load; the sweep has its own
        try:
            if hasattr(self.manager, "load"):  # lm-eval 0.4.10+: flat dicts of tasks and groups
                tasks = self.manager.load([self.name])["tasks"]
            else:
                from lm_eval.tasks import get_task_dict

                tasks = get_task_dict([self.name], self.manager)
        except Exception as e:  # noqa: BLE001  (the dataset's loader: a hub download offline, a missing file)
            raise UserError(f"lm-eval cannot load task {self.name!r}: {type(e).__name__}: {e}") from None
        task = tasks.get(self.name)
        if task is None or isinstance(task, dict):
            raise UserError(f"lm-eval task {self.name!r} is a group: name one of its tasks")
        return task

    def formats(self) -> list[str]:
        """The task's `<task>@<format>` variants lm-eval registers (another scoring of the same task, such as a
        generate_until twin of a multiple-choice task), where the installed lm-eval has them."""
        return sorted(t for t in self.manager.all_tasks if t.startswith(f"{self.name}@"))

    def mapping_entries(self, templates: tuple[str, ...] = (), scorings: tuple[str, ...] = ()) -> list[dict[str, str]]:
        """The grid's place of its runs: the task's own name as the benchmark, `task` as the template (the importer
        adds +nochat, +sys=<hash> for what a run did); a declared template's task the same benchmark, the template
        its name, so that `analyze` sees one benchmark in several templates; a generated twin the same benchmark and
        template, scored by matching the choice's text (the grid's scoring column says free_form)."""
        out = []
        for scoring in ("own", *(s for s in scorings if s != "own")):
            for t in (OWN_TEMPLATE, *(t for t in templates if t != OWN_TEMPLATE)):
                entry = {"match": variant_name(self.name, t, scoring), "benchmark": self.name}
                entry["template"] = "task" if t == OWN_TEMPLATE else t
                out.append(entry | ({"metric": GENERATED_METRIC_KEY} if scoring != "own" else {}))
        return out

    def facts(self) -> TaskFacts:
        if self._facts is None:
            self._facts = self._read_facts()
        return self._facts

    def _read_facts(self) -> TaskFacts:
        task = self.task_object()
        try:
            fewshot = task.fewshot_docs()
        except Exception:  # noqa: BLE001  (no split to draw from: lm-eval raises rather than returns none)
            fewshot = None
        return TaskFacts(
            self.name, str(task.config.output_type), fewshot is not None and len(fewshot) > 0, len(task.eval_docs)
        )


class _Dumper(yaml.SafeDumper):
    """A prompt with line breaks written as one quoted line with \\n, as lm-eval's own YAMLs write it."""


class Function(str):
    """A task-YAML value lm-eval imports (`!function module.name`)."""


_Dumper.add_representer(Function, lambda d, v: d.represent_scalar("!function", str(v)))


_Dumper.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style='"' if "\n" in v else None)
)


def variant_name(task: str, template: str, scoring: str = "own") -> str:
    """`<task>`, `__<template>` for a declared template, `__generate_until` for the generated twin."""
    parts = [task] + ([template] if template != OWN_TEMPLATE else []) + ([scoring] if scoring != "own" else [])
    return VARIANT_SEP.join(parts)


def _expression(value: Any, key: str) -> str:
    """A task-YAML value as one Jinja expression: a list as itself, `{{ expr }}` as expr, a document's field as
    its name, a number as itself."""
    if isinstance(value, (list, int)) and not isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str) and (m := JINJA_ONE.fullmatch(value.strip())) and "{%" not in value:
        return f"({m['expr'].strip()})"
    if isinstance(value, str) and FIELD.fullmatch(value.strip()):
        return value.strip()
    raise UserError(
        f"scoring generate_until: the task's {key} {value!r} is not one Jinja expression, a field or a list, so its "
        "answer's text cannot be derived (declare a template whose doc_to_choice and doc_to_target are)"
    )


def generated_twin(task: str, doc_to_choice: Any, doc_to_target: Any, module: str) -> tuple[dict[str, Any], str]:
    """A multiple-choice task's generated twin (lm-eval's generate_until): its task-YAML keys (the same prompt, the
    answer generated to the end of its line, the target shown in few-shot examples the right choice's text, `module`'s
    process_results reporting acc and parse_rate) and the text of that module, which binds the task's choice and
    target expressions to safetyrepro.anytask.generated.Scorer."""
    choices, target = _expression(doc_to_choice, "doc_to_choice"), _expression(doc_to_target, "doc_to_target")
    keys = {
        "output_type": "generate_until",
        "doc_to_target": bound(choices, target, ANSWER),
        "doc_to_choice": None,
        "process_results": Function(f"{module}.process_results"),
        "generation_kwargs": {"until": ["\n"], "do_sample": False, "max_gen_toks": 32},
        "metric_list": [
            {"metric": name, "aggregation": "mean", "higher_is_better": True} for name in GENERATED_METRICS
        ],
    }
    return keys, module_text(task, choices, target)


def variant_yaml(include: Path, task: str, template: str, keys: dict[str, Any], scoring: str = "own") -> str:
    """A declared template (or the generated twin) as an lm-eval task YAML: the task's own file included (lm-eval's
    `include:`, its keys under this file's), renamed `<task>__<template>`, with the template's keys over the task's
    own."""
    what = f"template {template!r}" + (f", scored {scoring}," if scoring != "own" else "")
    head = f"# {what} of lm-eval task {task!r} (safetyrepro sweep --task; the envelope's `templates`)\n"
    body = {"include": str(include), "task": variant_name(task, template, scoring), **keys}
    return head + yaml.dump(
        body, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1000
    )


def generation_kwargs(decoding: dict[str, Any], seed: int, generates: bool) -> dict[str, Any] | None:
    """lm-eval's gen_kwargs for an envelope's decoding: none for likelihood scoring (it samples nothing); greedy, or
    sampled at the decoding's temperature and top-p with `seed`; its token budget (`max_tokens`) as max_gen_toks."""
    if not generates:
        return None
    kwargs: dict[str, Any] = {"temperature": 0.0, "do_sample": False}
    if decoding.get("do_sample"):
        kwargs = {"temperature": decoding["temperature"], "top_p": decoding["top_p"], "do_sample": True, "seed": seed}
    if decoding.get("max_tokens"):
        kwargs["max_gen_toks"] = int(decoding["max_tokens"])
    return kwargs


def run_config(
    task: LmEvalTask,
    lm,
    envelope: TaskEnvelope,
    cfg: TaskConfig,
    seed: int,
    limit: int | None,
    out: Path,
) -> None:
    """One configuration at one seed through `simple_evaluate`, its results and samples written into `out` as
    lm-eval's own CLI writes them. The few-shot draw is lm-eval's default seed for every configuration (held
    fixed); `seed` is the sampled decoding's."""
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.loggers import EvaluationTracker

    gen_kwargs = generation_kwargs(envelope.decodings[cfg.decoding], seed, task.facts().generates)
    tracker = EvaluationTracker(output_path=str(out))
    with no_request_building_bar():
        res = simple_evaluate(
            model=lm,
            tasks=[task.name],
            num_fewshot=cfg.shots,
            limit=limit,
            log_samples=True,
            apply_chat_template=cfg.chat_template,
            fewshot_as_multiturn=cfg.chat_template and cfg.shots > 0,
            system_instruction=envelope.systems[cfg.system],
            gen_kwargs=gen_kwargs,
            task_manager=task.manager,
            bootstrap_iters=0,
            evaluation_tracker=tracker,
        )
    if res is None:
        raise UserError(f"lm-eval returned no results for task {task.name!r}")
    tracker.save_results_aggregated(results=res, samples=res["samples"])
    tracker.save_results_samples(task_name=task.name, samples=res["samples"][task.name])
