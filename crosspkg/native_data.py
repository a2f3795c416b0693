"""The packages' own datasets, rebuilt from the local benchmark mirror.

Only the data location changes. Each package's native task reads a Hugging Face dataset or a raw
GitHub file that cannot be reached here; these functions write the same records, in the schema and
order the native loaders produce, from the mirror files (checked by sha256 through SafetyRepro's
sources):

- lm-eval truthfulqa_mc1, inspect_evals truthfulqa: HF `truthfulqa/truthful_qa` multiple_choice/validation
  (= v0 `mc_task.json`), rebuilt from `truthfulqa/data/v0/mc_task.json`
- lm-eval bbq: HF `oskarvanderwal/bbq` All/test (the 11 category files, concatenated), rebuilt from
  `bbq/data/*.jsonl` + `bbq/extra/*` (9 of 11 categories, 3 partial)
- inspect_evals bbq: HF `heegyu/bbq` (per category, test), rebuilt from the same files
- lm-eval toxigen: HF `skg/toxigen-data` annotated/test, rebuilt from `toxigen/extra/annotated_test.csv`
- HELM truthful_qa: `sylinrl/TruthfulQA@d71c110 data/v1/TruthfulQA.csv`, rebuilt from
  `truthfulqa/data/v1/TruthfulQA.csv`, placed where HELM's downloader looks
- HELM bbq: `nyu-mll/BBQ@main data/<Category>.jsonl`, rebuilt from the same category files (the absent
  ones as empty files)
"""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.compat.helm import BBQ_DATA_DIR, TRUTHFULQA_CSV, scenario_data_path
from safetyrepro.errors import UserError
from safetyrepro.hashing import sha256_file
from safetyrepro.tasks.benchmarks.bbq import definition as bbq
from safetyrepro.tasks.benchmarks.toxigen import SOURCE as TOXIGEN_SOURCE
from safetyrepro.tasks.benchmarks.truthfulqa import SOURCE as TRUTHFULQA_SOURCE
from safetyrepro.tasks.sources import fetch, mirror_dir

# lm-eval's bbq/utils.py CATEGORIES order; the HF "All" config concatenates the category files
BBQ_CATEGORIES = (
    "Age",
    "Disability_status",
    "Gender_identity",
    "Nationality",
    "Physical_appearance",
    "Race_ethnicity",
    "Race_x_gender",
    "Race_x_SES",
    "Religion",
    "SES",
    "Sexual_orientation",
)
# inspect_evals' BBQSubset order
INSPECT_BBQ_SUBSETS = (
    "Age",
    "Disability_status",
    "Gender_identity",
    "Nationality",
    "Physical_appearance",
    "Race_ethnicity",
    "Race_x_SES",
    "Race_x_gender",
    "Religion",
    "SES",
    "Sexual_orientation",
)
TRUTHFULQA_V1_SHA256 = "f9bd9e859cc102cb1f647f1064da7e009be752c416845cf9fa56e6eaae403a7d"


def _mirror() -> Path:
    m = mirror_dir()
    if m is None:
        raise UserError(
            "crosspkg needs the benchmark mirror: set --data-dir or $SAFETYREPRO_DATA_DIR "
            "(a folder laid out like shared/data)"
        )
    return m


# ----------------------------------------------------------------------------- raw records


def truthfulqa_mc_records() -> list[dict]:
    """HF truthful_qa multiple_choice/validation rows: question, mc1_targets, mc2_targets."""

    rows = json.loads(fetch(TRUTHFULQA_SOURCE, "data/v0/mc_task.json").read_text(encoding="utf-8"))
    out = []
    for r in rows:
        out.append(
            {
                "question": r["question"],
                "mc1_targets": {"choices": list(r["mc1_targets"]), "labels": list(r["mc1_targets"].values())},
                "mc2_targets": {"choices": list(r["mc2_targets"]), "labels": list(r["mc2_targets"].values())},
            }
        )
    return out


def bbq_category_rows(category: str) -> list[dict]:
    """The raw rows of one BBQ category that the mirror has ([] for an absent one)."""
    if category in bbq.FULL or category in bbq.PARTIAL:
        return bbq._rows(category)
    return []


def bbq_present_categories() -> list[str]:
    return [c for c in BBQ_CATEGORIES if c in bbq.FULL or c in bbq.PARTIAL]


def bbq_records(order=BBQ_CATEGORIES) -> list[dict]:
    out = []
    for c in order:
        out += bbq_category_rows(c)
    return out


def toxigen_records() -> list[dict]:

    with open(fetch(TOXIGEN_SOURCE, "extra/annotated_test.csv"), encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["toxicity_ai"] = float(r["toxicity_ai"])
        r["toxicity_human"] = float(r["toxicity_human"])
        r["intent"] = float(r["intent"])
    return rows


# ----------------------------------------------------------------------------- files


def _write_parquet(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(path)
    return path


def _digest(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:12]


def local_datasets(root: Path) -> dict[str, dict]:
    """Parquet files standing in for the HF datasets, and the lm-eval overrides that point at them.

    Returns {benchmark: {"file": path, "split": name, "override": {...}, "rows": n}}."""
    out: dict[str, dict] = {}
    tqa = truthfulqa_mc_records()
    p = _write_parquet(tqa, root / f"truthfulqa_mc-{_digest(tqa)}" / "validation.parquet")
    out["truthfulqa"] = {
        "file": p,
        "split": "validation",
        "rows": len(tqa),
        "native": "truthfulqa/truthful_qa (multiple_choice, validation)",
    }
    bbq = bbq_records()
    p = _write_parquet(bbq, root / f"bbq_all-{_digest(bbq)}" / "test.parquet")
    out["bbq"] = {
        "file": p,
        "split": "test",
        "rows": len(bbq),
        "native": "oskarvanderwal/bbq (All, test)",
        "categories": bbq_present_categories(),
    }
    tox = toxigen_records()
    p = _write_parquet(tox, root / f"toxigen_annotated-{_digest(tox)}" / "test.parquet")
    # the native task names a training split (used only for few-shot); the anchor is 0-shot
    out["toxigen"] = {"file": p, "split": "test", "rows": len(tox), "native": "skg/toxigen-data (annotated, test)"}
    for b, d in out.items():
        d["override"] = {
            "dataset_path": "parquet",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {d["split"]: str(d["file"])}},
        }
        if b == "toxigen":
            d["override"]["training_split"] = None
    return out


def place_helm_scenario_data(benchmark_output: Path) -> dict:
    """Put the mirror files where HELM 0.5.16's `ensure_file_downloaded` looks, so it never downloads.

    TruthfulQA: scenarios/truthful_qa/data/TruthfulQA.csv (v1). BBQ: scenarios/bbq/data/<Category>
    (no suffix) for all 11 categories; the two the mirror lacks are empty files and the three partial
    ones hold the rows the mirror has, so `subject=all` runs on 9 categories (recorded)."""
    mirror = _mirror()
    bbq_rows: dict[str, int] = {}
    placed: dict[str, object] = {"truthful_qa": None, "bbq": bbq_rows}
    src = mirror / "truthfulqa" / "data" / "v1" / "TruthfulQA.csv"
    if not src.is_file() or sha256_file(src) != TRUTHFULQA_V1_SHA256:
        raise UserError(f"HELM's TruthfulQA needs {src} (v1, sha256 {TRUTHFULQA_V1_SHA256}) in the mirror")
    dst = scenario_data_path(benchmark_output, TRUTHFULQA_CSV)

    atomic_write(dst, src.read_bytes())
    placed["truthful_qa"] = "truthfulqa/data/v1/TruthfulQA.csv"
    bdir = scenario_data_path(benchmark_output, BBQ_DATA_DIR)
    bdir.mkdir(parents=True, exist_ok=True)
    for c in BBQ_CATEGORIES:
        rows = bbq_category_rows(c)

        atomic_write(bdir / c, "".join(json.dumps(r) + "\n" for r in rows))
        bbq_rows[c] = len(rows)
    return placed
