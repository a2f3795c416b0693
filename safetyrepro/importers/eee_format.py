"""What export and import share: Every Eval Ever's names for things (every_eval_ever 0.3.0's schemas;
docs/eee.md gives the mapping), SafetyRepro's keys inside EEE's string-valued `additional_details` /
`details` / `metadata` maps, and the datastore layout. SafetyRepro's keys start with `safetyrepro_`, so that
a reader tells them from a converter's and the importer tells a record SafetyRepro wrote
(`is_safetyrepro_record`) from any other. Nothing here reads or writes a file.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from typing import Any

from safetyrepro.errors import UserError

SCHEMA_VERSION = "0.3.0"  # the EEE schema the export writes
SUPPORTED_SCHEMAS = ("0.3.",)  # schema versions the import reads (0.3.x)
PREFIX = "safetyrepro_"
# JSON text under an extension EEE's validator does not collect: run over a whole export folder it
# reads every *.json and *.jsonl (every_eval_ever/validate.py, expand_paths), and this is no record
VERDICTS_FILE = "safetyrepro_verdicts.json5"
EARLIER_VERDICTS_FILES = ("safetyrepro_verdicts.json",)  # the name exports before issue 43 used
VERDICTS_FORMAT = "safetyrepro-eee-verdicts"
RELATIONSHIPS = ("first_party", "third_party", "collaborative", "other")  # source_metadata.evaluator_relationship
DATA_DIR = "data"  # EEE's datastore root inside --out

# generation_config.additional_details: the configuration's axes and identifiers
K_CONFIG_ID = PREFIX + "config_id"
K_TEMPLATE = PREFIX + "template"
K_DECODING = PREFIX + "decoding"
K_SHOTS = PREFIX + "shots"
K_SCORING = PREFIX + "scoring"
K_DO_SAMPLE = PREFIX + "do_sample"
K_TIER = PREFIX + "tier"
K_STRESS_TEMPLATE = PREFIX + "stress_template"
K_RULES_SHA = PREFIX + "rules_sha256"
K_SEEDS = PREFIX + "sampling_seeds"
K_NUM_FEWSHOT = "num_fewshot"  # the key EEE's lm-eval converter uses for the shot count
# score_details.details
K_N_ITEMS = PREFIX + "n_items"
K_N_SEEDS = PREFIX + "n_seeds"
K_SEED_SCORES = PREFIX + "seed_scores"
K_PARSE_RATE = PREFIX + "parse_rate"
K_PRECISION = PREFIX + "precision"
K_PACKAGE = PREFIX + "package"
K_TIE_RATE = PREFIX + "tie_rate"
K_ITEM_SET = PREFIX + "item_set"
K_SUBSET = PREFIX + "subset_id"
# metric_config.additional_details
K_BETTER = PREFIX + "better"
K_TIE_RULE = PREFIX + "tie_rule"
K_METRIC = PREFIX + "metric"
# model_info.additional_details
K_LABEL = PREFIX + "label"
K_WEIGHTS = PREFIX + "weights_sha256"
# eval_library.additional_details / source_metadata.additional_details
K_VERSION = PREFIX + "version"
K_GRID_SHA = PREFIX + "grid_sha256"

# The grid's package label -> EEE's eval_library.name (the names EEE's converters write)
LIBRARY_NAMES = {"lm-eval": "lm_eval", "inspect": "inspect_ai", "helm": "helm"}
PACKAGE_OF_LIBRARY = {v: k for k, v in LIBRARY_NAMES.items()}
# run.json `packages` keys for each grid package label
VERSION_KEYS = {"lm-eval": "lm_eval", "inspect": "inspect_ai", "helm": "crfm-helm"}

UUID_FILE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_INVALID_PATH_CHARS = re.compile(r'[<>:"/\\|?*\x00-\x1f]')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def file_uuid(*parts: str) -> str:
    """A UUID4-shaped name derived from `parts` (EEE's file names must be UUID4s; a hash keeps the
    export reproducible: the same cell of the same grid gets the same file name)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _component(value: str, what: str) -> str:
    """One datastore path component, as EEE's publisher makes it (helpers/io.py
    `_required_path_component`): ':' becomes '_'; unsafe names are refused."""
    value = value.strip().replace(":", "_")
    if (
        not value
        or value.lower() == "unknown"
        or value == DATA_DIR
        or _INVALID_PATH_CHARS.search(value)  # '/' among them
        or value.endswith((".", " "))  # '.' and '..' among them
        or value.split(".", 1)[0].upper() in _RESERVED
    ):
        raise UserError(f"{what} {value!r} cannot name an Every Eval Ever datastore folder")
    return value


def path_components(collection: str, model_id: str) -> tuple[str, str, str]:
    """(collection, developer, model) folders of `data/<collection>/<developer>/<model>/`, as EEE's
    `datastore_path_components` derives them: the developer is model_id's prefix (EEE falls back on
    model_info.developer for a flat id; the export never writes one), the rest of the id is the model
    folder with '/' flattened to '_'."""
    coll = "_".join(_component(p, "collection") for p in collection.split("/"))
    parts = model_id.strip().split("/")
    if any(not p for p in parts):
        raise UserError(f"model id {model_id!r} has an empty part")
    if len(parts) < 2:
        raise UserError(f"model id {model_id!r} is flat and names no developer")
    return coll, _component(parts[0], "model developer"), "_".join(_component(p, "model name") for p in parts[1:])


def model_id_for(label: str, overrides: dict[str, str]) -> str:
    """model_info.id for a grid label (docs/eee.md, "Field mapping"): EEE asks for an org/name id."""
    if label in overrides:
        return overrides[label]
    return label if HF_ID.fullmatch(label) else f"safetyrepro/{label}"


def dump_json(obj: Any) -> str:
    """Strict JSON (EEE's validator refuses NaN and Infinity), keys in the order given."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def dump_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(", ", ": ")) + "\n"


def number_str(x: Any) -> str:
    """A number as a details value (strings only): repr of the float, so it reads back exactly."""
    if isinstance(x, bool):
        return bool_str(x)
    if isinstance(x, int):
        return str(x)
    f = float(x)
    return repr(f) if math.isfinite(f) else ""


def bool_str(x: bool) -> str:
    return "true" if x else "false"


def is_safetyrepro_record(record: dict) -> bool:
    """A record `safetyrepro export eee` wrote: its results name the configuration and its library
    names SafetyRepro's version (a converter's record has neither)."""
    lib = (record.get("eval_library") or {}).get("additional_details") or {}
    results = record.get("evaluation_results") or []
    configs = (((r or {}).get("generation_config") or {}).get("additional_details") or {} for r in results)
    return K_VERSION in lib and bool(results) and all(K_CONFIG_ID in c for c in configs)
