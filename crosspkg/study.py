"""The study, step by step (see cli.py for the command)."""

from __future__ import annotations

import gc
import json
import platform
import re
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from safetyrepro.adapters.catalogue.loading import resolve_device
from safetyrepro.atomic import atomic_write, check_output_set, ensure_dir, staged_output
from safetyrepro.crosspkg import emulate, figures, native_data, report, tables
from safetyrepro.crosspkg.anchor import Anchor, check_benchmarks, model_folder
from safetyrepro.crosspkg.helm_env import helm_bin
from safetyrepro.crosspkg.records import ItemRecord, read_records, write_records
from safetyrepro.crosspkg.stacks.helm_native import HELM_MODEL_DIR
from safetyrepro.errors import UserError

STACKS = ("lm-eval", "helm", "inspect", "inspect-greedy")
OWN_LINKS = (HELM_MODEL_DIR,)  # HELM's model folder of links to the cached weights (helm_env.helm_model_folder)


def _versions() -> dict:
    out: dict[str, str | None] = {}
    for d in ("lm_eval", "inspect_ai", "transformers", "torch", "datasets", "safetyrepro"):
        try:
            out[d] = version(d)
        except PackageNotFoundError:
            out[d] = None
    return out


def native_step(anchor: Anchor, out: Path, packages, batch_size: int = 8, fresh: bool = False) -> dict:
    """Run (or reload) each package's native stack. Returns {stack: {"records": {b: [...]}, "meta": {...}}}."""
    folder = model_folder(anchor.model, anchor.precision)
    datasets = native_data.local_datasets(out / "data")
    results: dict[str, dict] = {}
    todo = []
    for pkg in packages:
        todo += ["inspect", "inspect-greedy"] if pkg == "inspect" else [pkg]
    for stack in todo:
        rec_path, meta_path = out / "native" / f"{stack}.jsonl", out / "native" / f"{stack}.meta.json"
        if not fresh and rec_path.is_file() and meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            if _same_anchor(meta.get("anchor"), _anchor_key(anchor)):
                recs = read_records(rec_path)
                meta.setdefault("datasets", _dataset_names(datasets))
                results[stack] = {"records": _by_benchmark(recs), "meta": meta}
                print(f"crosspkg: {stack}: reusing {rec_path}", file=sys.stderr)
                continue
        print(f"crosspkg: {stack}: running ...", file=sys.stderr, flush=True)
        t0 = time.time()
        if stack == "lm-eval":
            from safetyrepro.crosspkg.stacks import (
                lm_eval_native,  # lazy: only the package stacks asked for are loaded
            )

            res = lm_eval_native.run(anchor, folder, datasets, out, batch_size=batch_size)
        elif stack == "helm":
            from safetyrepro.crosspkg.stacks import (
                helm_native,  # lazy: only the package stacks asked for are loaded
            )

            res = helm_native.run(anchor, folder, out)
        else:
            from safetyrepro.crosspkg.stacks import (
                inspect_native,  # lazy: only the package stacks asked for are loaded
            )

            variant = "greedy" if stack.endswith("greedy") else "default"
            res = inspect_native.run(anchor, folder, datasets, out, variant=variant)
        gc.collect()
        recs = [r for b in res["records"] for r in res["records"][b]]
        meta = {k: v for k, v in res.items() if k != "records"}
        meta.update(
            {
                "anchor": _anchor_key(anchor),
                "model_folder": folder.to_dict(),
                "wall_s": time.time() - t0,
                "datasets": _dataset_names(datasets),
                "versions": _versions(),
            }
        )
        write_records(rec_path, recs)
        atomic_write(meta_path, json.dumps(meta, indent=1, default=str))
        results[stack] = {"records": res["records"], "meta": json.loads(meta_path.read_text())}
        print(f"crosspkg: {stack}: done in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return results


def _same_anchor(a: dict | None, b: dict) -> bool:
    """Whether recorded native runs answer this anchor (the device is not part of the nominal anchor)."""
    if not a:
        return False
    strip = lambda d: {k: v for k, v in d.items() if k != "device"}  # noqa: E731
    return strip(a) == strip(b)


def _dataset_names(datasets: dict) -> dict:
    return {b: f"{d['native']}, rebuilt from the mirror ({d['rows']} rows)" for b, d in datasets.items()}


def _anchor_key(anchor: Anchor) -> dict:
    d = anchor.to_dict()
    d.pop("extra", None)
    d["benchmarks"] = list(d["benchmarks"])
    return d


def _by_benchmark(recs: list[ItemRecord]) -> dict[str, list[ItemRecord]]:
    out: dict[str, list[ItemRecord]] = {}
    for r in recs:
        out.setdefault(r.benchmark, []).append(r)
    return out


def run_study(args) -> int:
    benches = check_benchmarks(args.benchmarks)
    for p in args.packages:
        if p not in ("lm-eval", "helm", "inspect"):
            raise UserError(f"unknown package {p!r}; allowed: lm-eval, helm, inspect")
    if args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    if "helm" in args.packages:
        helm_bin()  # fail early with the `make helm` hint

    device = resolve_device(args.device)
    anchor = Anchor(
        model=args.model,
        precision=args.precision,
        max_new_tokens=args.max_new_tokens,
        limit=args.limit,
        seed=args.seed,
        benchmarks=benches,
        device=device,
    )
    # lm-eval, Inspect and HELM write into it themselves: no link may lead out (but HELM's model folder
    # of links to the cached weights is our own, made by helm_env.helm_model_folder); and no file the
    # study did not write (an earlier study's are named by its marker, .safetyrepro-output.json)
    check_output_set(Path(args.out), COMMAND, legacy=legacy_study, carry=is_step_folder, own_links=OWN_LINKS)
    out = ensure_dir(Path(args.out))
    t0 = time.time()
    native = native_step(anchor, out, args.packages, batch_size=args.batch_size, fresh=args.fresh)
    t_native = time.time() - t0
    t7 = tables.table7(native, benches)
    t8 = tables.table8(native, benches)
    decomposition = None
    t_emulate = 0.0

    if not args.no_decompose:
        t1 = time.time()
        decomposition = emulate.decompose(
            anchor,
            native,
            benches,
            out,
            pairs=args.pairs,
            batch_size=args.batch_size,
            fresh=args.fresh,
            limit=getattr(args, "decompose_limit", None),
        )
        t_emulate = time.time() - t1
    run = {
        "anchor": _anchor_key(anchor),
        "versions": _versions(),
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "wall_s": {"native": t_native, "emulate": t_emulate, "total": time.time() - t0},
        "stack_wall_s": {s: native[s]["meta"].get("wall_s") for s in native},
    }
    # The step folders (native/, emulate/, data/) are the study's resumable store, written step by step
    # as a sweep's cells are; the study's own set (tables, decomposition, figures, run.json, report.md)
    # is built whole beside --out and swapped in at once, the step folders moved into it.
    with staged_output(out, COMMAND, legacy=legacy_study, carry=is_step_folder, own_links=OWN_LINKS) as stage:
        tables.write_tables(stage, t7, t8)
        if decomposition is not None:
            emulate.write_decomposition(stage, decomposition)
            figures.waterfalls(decomposition, stage)
        atomic_write(stage / "run.json", json.dumps(run, indent=1), root=stage)
        report.write_report(stage, anchor, t7, t8, decomposition, run)
    print(f"crosspkg: wrote {out / 'report.md'} ({time.time() - t0:.0f} s)")
    return 0


COMMAND = "crosspkg"
STEP_FOLDERS = ("native", "emulate", "data")


def is_step_folder(folder: Path) -> bool:
    return folder.name in STEP_FOLDERS


def legacy_study(folder: Path, files: list[str]) -> set[str] | None:
    """A study written before folders carried a marker: its run.json names the anchor; then its own
    files are the names it writes."""
    try:
        run = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(run, dict) and "anchor" in run):
        return None
    own = re.compile(
        r"^(table[78]\.(csv|md)|tables\.json|decomposition\.(json|csv|md)|waterfall_[\w-]+\.png|"
        r"run\.json|report\.md)$"
    )
    return {f for f in files if own.match(f)}
