"""From sweep options to an Inspect Flow spec (`inspect_flow.FlowSpec`), and its YAML file.

What runs is decided by the sweep's own code: the configurations by `select_configs` and
`plan_cells` (the same flags select the same cells, with the rules file's seeds per decoding), the
items by `item_sets` and `cell_item_ids` (`--limit`, `--subsample`), the task arguments and generate
options by the Inspect driver's `inspect_task_args` and `inspect_generate_args`. What the task sets
itself (the template's token budget and the benchmark's stop sequences) is read from the task that
`benchmark_task` builds: Flow replaces a task's generate config with the one its spec gives, so the
spec carries the task's own config merged with the decoding, which is what `inspect eval` runs.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from safetyrepro import __version__
from safetyrepro.adapters.catalogue.model_specs import ENGINE, INSPECT, _check_logprob
from safetyrepro.atomic import atomic_write
from safetyrepro.errors import UserError

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class FlowPlan:
    """What a sweep with the same options would run, and where the spec's logs go."""

    options: Any  # SweepOptions
    spec: Any  # SweepSpec: the sweep's identity
    rules: Any
    cells: list  # Cell, the sweep's, in its order
    items_for: Callable

    def entry(self, label: str):
        return next(m for m in self.options.models if m.label == label)


def plan(o) -> FlowPlan:
    """The sweep's cells for options `o` (SweepOptions, checked when made), checked as the sweep checks its
    models, without building any: a spec may be written where the providers' keys and servers are not."""
    from safetyrepro.compat.inspect_ai import provider_names
    from safetyrepro.sweep.drivers import item_sets
    from safetyrepro.sweep.plan import plan_cells

    rules, filters, configs = o.selection.rules, o.selection.filters, o.selection.configs
    scorings = {c.scoring for c in configs}
    known = None
    for m in o.models:
        if m.kind not in (ENGINE, INSPECT):
            raise UserError(
                f"{m.label}: {m.kind} models run through lm-eval, not Inspect; Inspect Flow runs "
                "SafetyRepro's engine models (safetyrepro/<model>) and inspect:<provider>/<model> only"
            )
        if m.kind == INSPECT and m.provider != "safetyrepro":
            known = known if known is not None else provider_names()
            if m.provider not in known:
                raise UserError(
                    f"{m.label}: Inspect has no model provider {m.provider!r}; known: {', '.join(sorted(known))}"
                )
        _check_logprob(m, scorings, explicit_scoring="scoring" in filters)
    recorded: dict[str, str] = {}
    for m in o.models:
        name = flow_model_name(m)
        if name in recorded:
            raise UserError(
                f"{recorded[name]} and {m.label} are both {name} to Inspect: their logs could not be "
                "told apart (write one spec per model args)"
            )
        recorded[name] = m.label
    return FlowPlan(
        o,
        o.spec("inspect"),
        rules,
        plan_cells(list(o.models), configs, rules),
        item_sets(o.subsample, o.subset_seed, o.limit),
    )


def flow_model_name(entry) -> str:
    """The Inspect model a sweep model is on Flow: `safetyrepro/<model>` for the engine (the
    provider of safetyrepro/inspect_plugin.py), `<provider>/<model>` for an Inspect provider."""
    return f"safetyrepro/{entry.target}" if entry.kind == ENGINE else entry.target


def flow_model(entry, precision: str, device: str | None, batch_size: int | None):
    """The FlowModel: the engine with its precision (and --device, --batch-size) as model args, or the
    provider's model with the entry's model args, as the sweep's Inspect backend builds it
    (`get_model(<provider>/<model>, **model_args)`)."""
    from inspect_flow import FlowModel

    if entry.kind == ENGINE:
        args = {"precision": precision, "device": device, "batch_size": batch_size}
        return FlowModel(name=flow_model_name(entry), model_args={k: v for k, v in args.items() if v is not None})
    args = entry.args_dict()
    return FlowModel(name=entry.target, **({"model_args": args} if args else {}))


@cache
def _task_own(benchmark: str, args: tuple) -> tuple[Any, Any]:
    """(generate config, version) of the task `benchmark_task` builds for these arguments."""
    from safetyrepro.tasks.inspect_tasks import benchmark_task

    task = benchmark_task(benchmark, **dict(args), check_active=False)
    return task.config, task.version


def model_labels(p: FlowPlan) -> list[dict]:
    """The import mapping's `models:` entries: the label the importer would give each model's logs
    (its Inspect name, `safetyrepro/` dropped) -> the sweep's label, where the two differ."""
    out = []
    for m in p.options.models:
        default = flow_model_name(m).removeprefix("safetyrepro/")
        if default != m.label:
            out.append({"match": re.escape(default), "label": m.label})
    return out


def build_spec(p: FlowPlan, log_dir: str, mapping_name: str):
    """The FlowSpec: one FlowTask per applicable cell and seed, in the sweep's order."""
    from inspect_ai.model import GenerateConfig
    from inspect_flow import FlowSpec, FlowTask

    from safetyrepro.sweep.cell import cell_item_ids
    from safetyrepro.sweep.drivers import inspect_generate_args, inspect_task_args

    o, tasks, skipped = p.options, [], []
    for cell in p.cells:
        cfg = cell.config
        if not cell.applicable:
            skipped.append(cell.key)
            continue
        entry = p.entry(cell.model)
        args = inspect_task_args(cfg, p.spec.tie_rule, p.spec.fewshot_draw)
        own_config, version = _task_own(cfg.benchmark, tuple(args.items()))
        items = p.items_for(cfg.benchmark)
        ids = cell_item_ids(items, p.spec.limit)
        whole = len(ids) == len(items.items) and p.spec.subsample is None
        model = flow_model(entry, cfg.precision, o.device, o.batch_size)
        for seed in cell.seeds:
            gen = {k: v for k, v in inspect_generate_args(p.rules, cfg, seed).items() if v is not None}
            subset: dict[str, Any] = {} if whole else {"sample_id": list(ids)}  # unset: the whole item set
            tasks.append(
                FlowTask(
                    name=f"safetyrepro/{cfg.benchmark}",
                    args=args,
                    model=model,
                    config=own_config.merge(GenerateConfig(**gen)),
                    version=version,
                    **subset,
                    flow_metadata={"model": cell.model, "config_id": cfg.config_id, "seed": seed},
                )
            )
    if not tasks:
        raise UserError(
            "no cell can run on Inspect: every selected configuration needs continuation "
            "log-likelihoods (logprob scoring), which these models do not give"
        )
    meta = {
        "safetyrepro": {
            "version": __version__,
            "sweep": p.spec.identity(),
            "rules_sha256": p.rules.sha256,
            "not_applicable": skipped,
            "import": f"safetyrepro import inspect {log_dir} --mapping {mapping_name} --out GRID_DIR",
        }
    }
    return FlowSpec(log_dir=log_dir, execution_type="inproc", tasks=tasks, flow_metadata=meta)


def spec_yaml(spec) -> str:
    """The spec as Flow's YAML (`flow run SPEC.yaml` loads it with `FlowSpec.model_validate`): Flow's
    own canonical dump (`inspect_flow.api.dump_spec`), checked portable first."""
    import yaml
    from inspect_flow.api import dump_spec, validate_portable_spec

    validate_portable_spec(spec)

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data):  # each task written out whole
            return True

    def text(dumper, s: str):  # a stop sequence "\n\n" stays readable, as one quoted string
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style='"' if "\n" in s else None)

    _Dumper.add_representer(str, text)
    return yaml.dump(dump_spec(spec), Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=120)


# the first line of each file `flow` writes: how a rerun knows the file is its own to replace
SPEC_HEADER = "# Inspect Flow spec written by `safetyrepro flow`"
MAPPING_HEADER = "# the sweep's model labels for `safetyrepro import inspect`"


def _check_ours(path: Path, header: str) -> None:
    """A file already at `path` is replaced only when `flow` wrote it (its first line says so)."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir():
        raise UserError(f"{path} is a folder; flow writes a file there: choose another --out")
    try:
        with open(path, "rb") as f:
            ours = f.read(len(header)).decode("utf-8", "replace") == header
    except OSError:
        ours = False
    if not ours:
        raise UserError(
            f"{path} exists and was not written by `safetyrepro flow`; move it away or choose another --out "
            f"(flow never replaces a file it did not write)"
        )


def mapping_path(spec_path: Path) -> Path:
    return spec_path.with_name(spec_path.stem + ".mapping.yaml")


def write(o, out: Path, log_dir: str | None = None) -> tuple[Path, Path, FlowPlan, Any]:
    """Write the spec to `out` (.yaml) and beside it the import mapping (`<stem>.mapping.yaml`: the
    sweep's model labels); returns (spec path, mapping path, plan, spec)."""
    import yaml

    out = Path(out)
    if out.suffix not in SPEC_SUFFIXES:
        raise UserError(f"--out {out}: a Flow spec file ends in .yaml or .yml")
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; give the spec's file name (e.g. {out / 'flow.yaml'})")
    mapping = mapping_path(out)
    for path, header in ((out, SPEC_HEADER), (mapping, MAPPING_HEADER)):
        _check_ours(path, header)
    with tempfile.TemporaryDirectory() as tmp:  # the plan never writes; its `out` is not the spec
        p = plan(replace(o, out=Path(tmp) / "unused"))
    log_dir = log_dir or f"logs-{out.stem}"
    spec = build_spec(p, log_dir, mapping.name)
    text = spec_yaml(spec)
    header = (
        f"{SPEC_HEADER} (docs/flow.md): one task per cell and seed.\n"
        f"# Run: flow run {out.name}    Import: {spec.flow_metadata['safetyrepro']['import']}\n"
    )
    atomic_write(
        mapping,
        f"{MAPPING_HEADER} (written with {out.name})\n" + yaml.safe_dump({"models": model_labels(p)}, sort_keys=False),
    )
    atomic_write(out, header + text)
    return out, mapping, p, spec
