"""SafetyRepro's lm-eval task YAMLs, rendered from the benchmark definitions and the rules file.

Nothing is committed: lm-eval finds them in a folder rendered on first use and kept in the cache
(`<cache>/lm_eval_tasks/<sha16 of the texts>/`, see `generated_dir`), so a new benchmark folder
shows up as lm-eval tasks with no step and no file elsewhere.

    python -m safetyrepro.tasks.lm_eval_tasks            # print the folder (rendering it if need be)
    python -m safetyrepro.tasks.lm_eval_tasks --out DIR  # write a copy into DIR, to read or to ship

Two shared bases (`_safetyrepro_logprob.yaml`, `_safetyrepro_free_form.yaml`) carry the functions
(`lm_eval_task_functions`); each task file is a few lines over one of them, written in a loop over
the registry's benchmarks, the templates and the benchmark's scorings, with its extra metrics. Tasks:
`safetyrepro_<benchmark>_t<k>` (logprob, multiple_choice) and `safetyrepro_<benchmark>_t<k>_gen` (free-form,
generate_until); a tag `safetyrepro_<benchmark>` per benchmark and `safetyrepro` for all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import yaml

from safetyrepro.atomic import atomic_write
from safetyrepro.cache_root import cache_root
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.envelope import default_rules

COMPLETE = ".complete"  # written last: a folder without it was interrupted and is written again
FUNCTIONS = "safetyrepro.tasks.lm_eval_task_functions"
HEADER = "# Rendered by safetyrepro.tasks.lm_eval_tasks from the benchmark definitions; do not edit.\n"


NOTES = {
    "_safetyrepro_common.yaml": (
        "# The demonstrations come from the benchmark's pool of unscored items (FixedDemos), never from\n"
        "# the test split: it is named as the few-shot split only so that lm-eval hands the sampler the\n"
        '# document being prompted, which --metadata \'{"fewshot_draw": "per_item"}\' seeds its draw on.\n'
    )
}


class _Function(str):
    pass


yaml.SafeDumper.add_representer(_Function, lambda d, v: d.represent_scalar("!function", f"{FUNCTIONS}.{v}"))


def fn(name: str) -> _Function:
    return _Function(name)


def _metric(name: str, aggregation, higher: bool = True) -> dict:
    return {"metric": name, "aggregation": aggregation, "higher_is_better": higher}


BASES = {
    "_safetyrepro_common.yaml": {
        "custom_dataset": fn("dataset"),
        "test_split": "test",
        "fewshot_split": "test",  # lm-eval hands the sampler the test document then; FixedDemos draws from the pool
        "fewshot_config": {"sampler": fn("FixedDemos"), "doc_to_target": fn("demo_answer")},
        "description": "system",
        "doc_to_text": fn("doc_to_text"),
        "metadata": {"version": 1.0},
    },
    "_safetyrepro_logprob.yaml": {
        "include": "_safetyrepro_common.yaml",
        "output_type": "multiple_choice",
        "doc_to_choice": fn("doc_to_choice"),
        "doc_to_target": fn("doc_to_target"),
        "process_results": fn("process_results_logprob"),
    },
    "_safetyrepro_free_form.yaml": {
        "include": "_safetyrepro_common.yaml",
        "output_type": "generate_until",
        "doc_to_target": fn("doc_to_target_text"),
        "process_results": fn("process_results_free_form"),
    },
}


def task_name(benchmark: str, template: str, scoring: str) -> str:
    return f"safetyrepro_{benchmark}_{template.lower()}" + ("_gen" if scoring == "free_form" else "")


def task_config(benchmark: str, template: str, scoring: str) -> dict:
    bench, rules = get_benchmark(benchmark), default_rules()
    # lm-eval's flag is a bool: a benchmark whose ideal is a target (CrowS-Pairs: 0.5) is not "higher is
    # better", so it says false there (lm-eval only draws the arrow from it); the analysis reads `better`
    metrics = [
        _metric("acc", "mean", higher=bench.better == "higher"),
        _metric("parse_rate", "mean"),
        _metric("top_answer_share", fn("aggregate_top_answer_share"), higher=False),
    ]
    if scoring == "logprob":
        metrics.append(_metric("tie_rate", "mean", higher=False))
    for spec in bench.extra_metrics:
        metrics.append(_metric(spec.name, fn("aggregate_extra_metric"), higher=spec.higher_is_better))
    cfg = {
        "include": f"_safetyrepro_{scoring}.yaml",
        "task": task_name(benchmark, template, scoring),
        "tag": ["safetyrepro", f"safetyrepro_{benchmark}"],
        "dataset_kwargs": {"benchmark": benchmark, "template": template},
        "metric_list": metrics,
    }
    if scoring == "free_form":
        greedy = rules.decodings["greedy"]
        cfg["generation_kwargs"] = {
            "until": list(bench.stop_sequences(template)),
            "max_gen_toks": rules.max_new(template),
            "do_sample": greedy.do_sample,
            "temperature": greedy.temperature,
        }
    return cfg


def render() -> dict[str, str]:
    files = {name: HEADER + NOTES.get(name, "") + yaml.safe_dump(cfg, sort_keys=False) for name, cfg in BASES.items()}
    rules = default_rules()
    for benchmark in BENCHMARKS:
        for template in rules.axes["template"]:
            for scoring in get_benchmark(benchmark).scorings:
                cfg = task_config(benchmark, template, scoring)
                files[f"{cfg['task']}.yaml"] = HEADER + yaml.safe_dump(cfg, sort_keys=False, width=120)
    return files


def write_folder(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        atomic_write(folder / name, text, root=folder)
    atomic_write(folder / COMPLETE, "", root=folder)
    return folder


def generated_dir() -> Path:
    """The folder holding the current YAMLs: `<cache>/lm_eval_tasks/<sha16>/`, rendered once per
    content (a changed definition or rules file gets a new folder); a temporary folder when the cache
    cannot be written."""
    files = render()
    digest = hashlib.sha256(json.dumps(sorted(files.items())).encode("utf-8")).hexdigest()[:16]
    try:
        folder = cache_root() / "lm_eval_tasks" / digest
        if not (folder / COMPLETE).is_file():
            write_folder(folder, files)
        return folder
    except OSError:
        return write_folder(Path(tempfile.mkdtemp(prefix="safetyrepro-lm-eval-tasks-")), files)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write a copy of the YAMLs into this folder")
    args = ap.parse_args(argv)
    if args.out:
        files = render()
        write_folder(args.out, files)
        print(f"wrote {len(files)} files to {args.out}")
    else:
        print(generated_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
