"""An Inspect task of the user's choosing (a registered name, `file.py` or `file.py@task`): its facts for a default
envelope, and one run of one configuration and seed through `inspect_ai.eval`, its log written into a folder that
`safetyrepro import inspect` then reads. The system instruction is Inspect's own `system_message` generate option
(the log records it); chain of thought is Inspect's `chain_of_thought()` before the task's solver, the task then
named `<task>__cot` so that the grid keeps it apart. Epochs (each sample run k times) are Inspect's `epochs`; the
importer reads an item's score as the mean over its epochs, and the grid has no epochs axis, so a run of k > 1
epochs is named `<task>__epochs<k>` (template `own-epochs<k>`, or `cot-epochs<k>`) to keep it apart too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspect_ai import eval as inspect_eval
from inspect_ai import task_with
from inspect_ai.solver import chain_of_thought

from safetyrepro.adapters.catalogue.model_specs import ENGINE, INSPECT
from safetyrepro.compat.inspect_ai import load_tasks
from safetyrepro.errors import UserError

from .envelope import TaskConfig, TaskEnvelope, TaskFacts, TaskRef

COT_SUFFIX = "__cot"
EPOCHS_SUFFIX = "__epochs"


@dataclass
class InspectTask:
    """The task's name as Inspect records it, and how to build it."""

    spec: str
    name: str
    n_items: int | None = None

    @classmethod
    def open(cls, ref: TaskRef) -> InspectTask:
        task = _one_task(ref.name, {})
        try:
            n = len(task.dataset)
        except TypeError:  # a streamed dataset: no length before it runs
            n = None
        return cls(ref.name, str(task.name), n)

    def facts(self) -> TaskFacts:
        return TaskFacts(self.name, "generate_until", False, self.n_items)

    def mapping_entries(self, epochs: tuple[int, ...] = (1,)) -> list[dict[str, str]]:
        """The grid's place of every name the runs record: the task's solver (`own`) and after chain of thought,
        at each epoch count."""
        return [
            {"match": run_name(self.name, solver, k), "benchmark": self.name, "template": run_template(solver, k)}
            for k in epochs
            for solver in ("own", "cot")
        ]


def run_name(task: str, solver: str, epochs: int) -> str:
    """The task's name in a run's log: `<task>`, `__cot` after chain of thought, `__epochs<k>` for k > 1 epochs."""
    return task + (COT_SUFFIX if solver == "cot" else "") + (f"{EPOCHS_SUFFIX}{epochs}" if epochs != 1 else "")


def run_template(solver: str, epochs: int) -> str:
    return solver + (f"-epochs{epochs}" if epochs != 1 else "")


def _one_task(spec: str, task_args: dict[str, Any]):
    try:
        tasks = load_tasks(spec, task_args)
    except Exception as e:  # noqa: BLE001  (Inspect's loader: a missing file, a task that fails to build)
        raise UserError(f"Inspect cannot load task {spec!r}: {type(e).__name__}: {e}") from None
    if not tasks:
        raise UserError(
            f"--task inspect:{spec}: Inspect finds no task there (a registered name, file.py or file.py@task)"
        )
    if len(tasks) != 1:
        raise UserError(f"--task inspect:{spec} names {len(tasks)} tasks; name one (file.py@task)")
    return tasks[0]


def inspect_model(entry, precision: str, device: str | None, batch_size: int | None) -> tuple[str, dict[str, Any]]:
    """Inspect's name and model arguments of a model entry: SafetyRepro's engine is the provider
    `safetyrepro/<model>`, given the sweep's --precision, --device and --batch-size as lm-eval's path is."""
    if entry.kind == ENGINE:
        args = {"precision": precision, "device": device, "batch_size": batch_size}
        return f"safetyrepro/{entry.target}", {k: v for k, v in args.items() if v is not None}
    if entry.kind == INSPECT:
        return entry.target, entry.args_dict()
    raise UserError(f"model {entry.label}: an Inspect task runs on the engine or an Inspect provider (inspect:...)")


def run_config(
    task: InspectTask,
    model: tuple[str, dict[str, Any]],
    envelope: TaskEnvelope,
    cfg: TaskConfig,
    seed: int,
    limit: int | None,
    out: Path,
) -> None:
    """One configuration at one seed: the task built with its `-T` arguments, chain of thought before its solver
    where the configuration says so, evaluated with the decoding's and the system instruction's generate options."""
    built = _one_task(task.spec, dict(cfg.args))
    if cfg.solver == "cot":
        built = task_with(built, solver=[chain_of_thought(), built.solver])
    if (name := run_name(task.name, cfg.solver, cfg.epochs)) != task.name:
        built = task_with(built, name=name)
    dec = envelope.decodings[cfg.decoding]
    options: dict[str, Any] = {"temperature": float(dec["temperature"])}
    if dec.get("do_sample"):
        options.update(top_p=float(dec["top_p"]), seed=seed)
    if dec.get("max_tokens"):
        options["max_tokens"] = int(dec["max_tokens"])
    if (text := envelope.systems[cfg.system]) is not None:
        options["system_message"] = text
    if cfg.epochs != 1:
        options["epochs"] = cfg.epochs
    name, model_args = model
    logs = inspect_eval(
        built, model=name, model_args=model_args, limit=limit, log_dir=str(out), display="none", **options
    )
    if not logs or logs[0].status != "success":
        error = getattr(logs[0], "error", None) if logs else None
        raise UserError(
            f"Inspect's run of {task.name} ({cfg.run_id}) ended {logs[0].status if logs else 'empty'}: {error}"
        )
