"""The catalogue of bad inputs and faults (docs/failures.md). Every case: exit code 2 (0 for a closed
pipe), exactly one line on stderr naming the problem, no traceback, and a finished sweep folder
that is byte-identical afterwards. No model is loaded: each case is refused before that. The
healing cases that need a real model (damaged cell files recomputed) are in tests/sweep/test_sweep_slow.py."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from safetyrepro.adapters.catalogue.model_specs import parse_model_spec
from safetyrepro.cli import main
from safetyrepro.sweep.cell import cell_record
from safetyrepro.sweep.options import SweepOptions
from safetyrepro.sweep.store import Store
from safetyrepro.sweep.sweeper import Sweep

SWEEP = ["--benchmarks", "xstest", "--tier", "conservative_core", "--limit", "2", "--no-progress"]


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory, data_dir):
    """A finished sweep folder (smollm2, xstest conservative core, 2 items), made without a model: the
    cell records are written as a sweep writes them, from made-up per-item records."""
    from safetyrepro.sweep.records import ItemRecord

    root = tmp_path_factory.mktemp("finished")
    out = root / "run"
    sweep = Sweep.create(
        SweepOptions(
            models=(parse_model_spec("smollm2"),),
            out=out,
            benchmarks=("xstest",),
            tier="conservative_core",
            limit=2,
            progress=False,
        )
    )
    sweep.store.lock()
    sweep.store.write_identity(sweep.spec.identity(), None)
    for k, cell in enumerate(sweep.cells):
        items = sweep.items_for("xstest")
        recs = [
            ItemRecord(
                it.id,
                0,
                "h",
                "x",
                0,
                True,
                0,
                float((k + i) % 2),
                [-1.0, -2.0] if cell.config.scoring == "logprob" else None,
            )
            for i, it in enumerate(items.items[:2])
        ]
        sweep.store.commit(
            cell.model,
            cell.file_stem,
            cell_record(cell, sweep.spec, sweep.rules, {"weights_sha256": "ab" * 32}, recs, items, 0.1),
        )
    sweep.store.write_outputs(sweep.store.records(), [c.key for c in sweep.cells])
    (out / "run.json").write_text(json.dumps({"rules_sha256": sweep.rules.sha256}))
    sweep.store.unlock()
    return out


@pytest.fixture
def folder(finished, tmp_path):
    """A private copy of the finished sweep for one case."""
    dst = tmp_path / "run"
    shutil.copytree(finished, dst)
    return dst


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _truncated_gguf(tmp: Path) -> Path:
    from safetyrepro.adapters.catalogue.weights import resolve_weights

    src = resolve_weights("smollm2").path
    dst = tmp / "cut.gguf"
    with open(src, "rb") as f, open(dst, "wb") as o:
        o.write(f.read(5_000_000))
    return dst


# (id, how to set up -> argv (the folder's path is {out}, a scratch dir {tmp}), message regex)
CASES = [
    ("empty-model", lambda t: ["sweep", "--models", "", *SWEEP], r"an empty model name"),
    ("unknown-model", lambda t: ["sweep", "--models", "gpt-17", *SWEEP], r"unknown model 'gpt-17'"),
    ("model-twice", lambda t: ["sweep", "--models", "smollm2", "smollm2", *SWEEP], r"listed twice"),
    (
        "unknown-lm-eval-model",
        lambda t: ["sweep", "--models", "lm-eval:nope:a=1", *SWEEP],
        r"lm-eval has no model 'nope'",
    ),
    ("lm-eval-args-no-equals", lambda t: ["sweep", "--models", "lm-eval:hf:pretrained", *SWEEP], r"not key=value"),
    (
        "lm-eval-missing-folder",
        lambda t: ["sweep", "--models", f"lm-eval:hf:pretrained={t / 'gone'}", *SWEEP],
        r"pretrained=.*gone does not exist",
    ),
    ("lm-eval-no-name", lambda t: ["sweep", "--models", "lm-eval::x=1", *SWEEP], r"lm-eval:<model>:<model_args>"),
    (
        "inspect-no-provider",
        lambda t: ["sweep", "--models", "inspect:gpt4", "--package", "inspect", *SWEEP],
        r"inspect:<provider>/<model>",
    ),
    (
        "inspect-unknown-provider",
        lambda t: ["sweep", "--models", "inspect:nope/x", "--package", "inspect", *SWEEP],
        r"no model provider 'nope'",
    ),
    (
        "lm-eval-under-inspect",
        lambda t: ["sweep", "--models", "lm-eval:hf:pretrained=/x", "--package", "inspect", *SWEEP],
        r"--package lm-eval only",
    ),
    (
        "inspect-under-lm-eval",
        lambda t: ["sweep", "--models", "inspect:openai/gpt-4o", *SWEEP],
        r"--package inspect only",
    ),
    (
        "server-down",
        lambda t: [
            "sweep",
            "--models",
            f"lm-eval:local-completions:base_url=http://127.0.0.1:{_free_port()}/v1/completions,model=m",
            *SWEEP,
        ],
        r"cannot reach the server",
    ),
    (
        "logprob-of-chat-api",
        lambda t: ["sweep", "--models", "lm-eval:local-chat-completions:model=m", *SWEEP, "--scoring", "logprob"],
        r"logprob scoring needs continuation log-likelihoods",
    ),
    (
        "unknown-benchmark",
        lambda t: ["sweep", "--models", "smollm2", "--benchmarks", "mmlu"],
        r"unknown benchmark 'mmlu'",
    ),
    ("unknown-tier", lambda t: ["sweep", "--models", "smollm2", "--tier", "stresss"], r"unknown tier 'stresss'"),
    (
        "unknown-template",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--templates", "T9"],
        r"unknown template 'T9'",
    ),
    (
        "unknown-decoding",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--decodings", "hot"],
        r"unknown decoding 'hot'",
    ),
    ("shots-outside", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--shots", "4"], r"unknown shots 4"),
    (
        "crows-free-form",
        lambda t: ["sweep", "--models", "smollm2", "--benchmarks", "crows_pairs", "--scoring", "free_form"],
        r"allows scoring logprob only",
    ),
    (
        "logprob-sampled",
        lambda t: [
            "sweep",
            "--models",
            "smollm2",
            "--benchmarks",
            "xstest",
            "--scoring",
            "logprob",
            "--decodings",
            "moderate",
        ],
        r"admit no full configuration",
    ),
    ("limit-zero", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--limit", "0"], r"--limit must be a positive"),
    (
        "limit-above-subset",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--limit", "99999"],
        r"more than the 300 items of the xstest subset",
    ),
    ("subsample-zero", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--subsample", "0"], r"--subsample must be"),
    (
        "subset-seed-negative",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--subsample", "0.8", "--subset-seed", "-1"],
        r"--subset-seed must be a whole number >= 0, got -1",
    ),
    (
        "template-twice",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--templates", "T1", "T1"],
        r"template 'T1' is listed twice",
    ),
    (
        "lock-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"\.lock is a symbolic link",
    ),
    # issue 23: specs, the cache, and links planted where SafetyRepro writes (PLANTS below)
    (
        "lm-eval-empty-args",
        lambda t: ["sweep", "--models", "lm-eval:hf:", *SWEEP],
        r"'hf' model needs model_args pretrained=",
    ),
    (
        "lm-eval-no-args",
        lambda t: ["sweep", "--models", "lm-eval:hf", *SWEEP],
        r"'hf' model needs model_args pretrained=",
    ),
    (
        "lm-eval-server-without-url",
        lambda t: ["sweep", "--models", "lm-eval:local-completions:model=m", *SWEEP],
        r"needs model_args base_url=",
    ),
    (
        "inspect-empty-spec",
        lambda t: ["sweep", "--models", "inspect:", "--package", "inspect", *SWEEP],
        r"inspect:<provider>/<model>",
    ),
    ("cache-dir-is-a-file", lambda t: ["sweep", "--models", "smollm2", *SWEEP], r"SAFETYREPRO_CACHE_DIR=.* is a file"),
    ("cache-dir-under-a-file", lambda t: ["sweep", "--models", "smollm2", *SWEEP], r"lies under the file"),
    (
        "outputs-cache-locked",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--limit", "1", "--out", str(t / "new")],
        r"another process holds it .* the file is not damaged",
    ),
    (
        "outputs-cache-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--limit", "1", "--out", str(t / "new")],
        r"outputs.sqlite is a symbolic link",
    ),
    (
        "cells-folder-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"cells is a symbolic link",
    ),
    (
        "model-folder-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"cells/smollm2-\w+ is a symbolic link",
    ),
    (
        "cell-file-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"\.json is a symbolic link",
    ),
    (
        "grid-csv-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"grid.csv is a symbolic link",
    ),
    (
        "logs-is-a-symlink",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"logs is a symbolic link",
    ),
    (
        "analyze-out-holds-a-link",
        lambda t: ["analyze", str(_two_model_grid(t)), "--out", str(t / "a")],
        r"figures is a symbolic link",
    ),
    (
        "analyze-out-report-link",
        lambda t: ["analyze", str(_two_model_grid(t)), "--out", str(t / "a")],
        r"report.md is a symbolic link",
    ),
    (
        "compare-out-holds-a-link",
        lambda t: ["compare", "{out}/grid.csv", "{out}/grid.csv", "--labels", "a", "b", "--out", str(t / "a")],
        r"report.md is a symbolic link",
    ),
    (
        "export-out-is-a-symlink",
        lambda t: ["models", "export", "smollm2", "--out", str(t / "a")],
        r"is a symbolic link",
    ),
    (
        "crosspkg-out-holds-a-link",
        lambda t: ["crosspkg", "--packages", "lm-eval", "--benchmarks", "bbq", "--limit", "1", "--out", str(t / "a")],
        r"is a symbolic link",
    ),
    (
        "analyze-grid-is-a-directory",
        lambda t: ["analyze", "{out}", "--out", str(t / "a")],
        r"grid file .* is a directory; give the grid file itself",
    ),
    (
        "analyze-items-is-a-directory",
        lambda t: ["analyze", str(_two_model_grid(t)), "--items", str(t), "--out", str(t / "a")],
        r"items file .* is a directory",
    ),
    (
        "analyze-items-other-model",
        lambda t: ["analyze", str(_two_model_grid(t)), "--items", str(_items(t, "ghost")), "--out", str(t / "a")],
        r"8 records are for model\(s\) the grid does not have \('ghost'\)",
    ),
    (
        "analyze-items-unknown-ids",
        lambda t: ["analyze", str(_two_model_grid(t)), "--items", str(_items(t, "ids")), "--out", str(t / "a")],
        r"hold more items than the grid's n_items \(e.g. smollm2 on xstest/\S+: 3 item ids, the grid says 2\)",
    ),
    (
        "analyze-items-other-ids",
        lambda t: ["analyze", str(_two_model_grid(t)), "--items", str(_items(t, "swap")), "--out", str(t / "a")],
        r"hold different item ids \(e.g. xstest/",
    ),
    (
        "subsample-above-one",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--subsample", "1.5"],
        r"--subsample must be",
    ),
    (
        "batch-size-zero",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--batch-size", "0"],
        r"--batch-size must be",
    ),
    ("workers-zero", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--workers", "0"], r"--workers must be"),
    (
        "unknown-precision",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--precision", "int3"],
        r"unknown precision 'int3'",
    ),
    (
        "unknown-tie-rule",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--tie-rule", "random"],
        r"invalid choice: 'random'",
    ),
    (
        "unknown-package",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--package", "helm"],
        r"invalid choice: 'helm'",
    ),
    ("device-tpu", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--device", "tpu"], r"unknown device 'tpu'"),
    ("device-cuda-absent", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--device", "cuda"], r"no CUDA device"),
    ("truncated-gguf", lambda t: ["sweep", "--models", str(_truncated_gguf(t)), *SWEEP], r"truncated GGUF file"),
    ("not-a-gguf", lambda t: ["sweep", "--models", str(_write(t / "x.gguf", "hello")), *SWEEP], r"not a GGUF file"),
    (
        "folder-without-config",
        lambda t: ["sweep", "--models", str(_mkdir(t / "empty-model")), *SWEEP],
        r"not a Hugging Face model folder",
    ),
    (
        "models-file-missing",
        lambda t: ["sweep", "--models-file", str(t / "none.yaml"), *SWEEP],
        r"cannot read models file",
    ),
    (
        "models-file-bad-yaml",
        lambda t: ["sweep", "--models-file", str(_write(t / "m.yaml", "models: [\n")), *SWEEP],
        r"not valid YAML",
    ),
    (
        "models-file-unknown-key",
        lambda t: ["sweep", "--models-file", str(_write(t / "m.yaml", "models:\n  - {spec: smollm2, x: 1}\n")), *SWEEP],
        r"unknown key\(s\) x",
    ),
    (
        "models-file-empty",
        lambda t: ["sweep", "--models-file", str(_write(t / "m.yaml", "models: []\n")), *SWEEP],
        r"non-empty list",
    ),
    (
        "models-file-same-label",
        lambda t: [
            "sweep",
            "--models-file",
            str(_write(t / "m.yaml", "models:\n  - {label: a, spec: smollm2}\n  - {label: a, spec: gemma3-270m}\n")),
            *SWEEP,
        ],
        r"'a' is listed twice",
    ),
    ("no-model", lambda t: ["sweep", *SWEEP], r"no model given"),
    (
        "out-is-a-file",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", str(_write(t / "f", "x"))],
        r"is a file, not a folder",
    ),
    (
        "out-parent-is-a-file",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", str(_write(t / "f", "x") / "sub")],
        r"Not a directory",
    ),
    (
        "out-name-too-long",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", str(t / ("x" * 300))],
        r"File name too long",
    ),
    (
        "other-settings",
        lambda t: [
            "sweep",
            "--models",
            "smollm2",
            "--benchmarks",
            "xstest",
            "--tier",
            "conservative_core",
            "--limit",
            "3",
            "--out",
            "{out}",
        ],
        r"other settings \(limit: 2, now 3\)",
    ),
    (
        "other-rules",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--rules", str(_other_rules(t)), "--out", "{out}"],
        r"made under other rules",
    ),
    (
        "damaged-sweep-json",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"sweep.json is damaged",
    ),
    ("damaged-run-json", lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"], r"run.json is damaged"),
    (
        "grid-without-sweep",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", str(_hand_grid(t))],
        r"no SafetyRepro sweep recorded",
    ),
    (
        "corrupt-outputs-cache",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--limit", "1", "--out", str(t / "new")],
        r"outputs cache .*outputs.sqlite failed \(file is not a database\); move it aside",
    ),
    (
        "outputs-cache-is-a-folder",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--limit", "1", "--out", str(t / "new")],
        r"outputs cache .*outputs.sqlite failed",
    ),
    (
        "sweep-in-use",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--out", "{out}"],
        r"another sweep \(pid \d+\) is writing",
    ),
    (
        "rules-missing",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--rules", str(t / "none.yaml")],
        r"none.yaml",
    ),
    (
        "rules-bad-yaml",
        lambda t: ["sweep", "--models", "smollm2", *SWEEP, "--rules", str(_write(t / "r.yaml", "axes: [\n"))],
        r"r.yaml",
    ),
    ("items-index", lambda t: ["items", "--benchmark", "bbq", "--show", "99999"], r"bbq has 300 scored items"),
    (
        "items-unknown-id",
        lambda t: ["items", "--benchmark", "bbq", "--show", "nope"],
        r"no scored bbq item has this id",
    ),
    ("items-shots", lambda t: ["items", "--shots", "99"], r"--shots 99 is outside the envelope"),
    ("items-benchmark", lambda t: ["items", "--benchmark", "nope"], r"unknown benchmark 'nope'"),
    ("envelope-tier", lambda t: ["envelope", "--tier", "nope"], r"unknown tier 'nope'"),
    ("envelope-benchmark", lambda t: ["envelope", "--benchmark", "nope"], r"unknown benchmark 'nope'"),
    ("envelope-rules-missing", lambda t: ["envelope", "--rules", str(t / "none.yaml")], r"none.yaml"),
    ("export-onto-a-file", lambda t: ["models", "export", "smollm2", "--out", str(_write(t / "f", "x"))], r"f"),
    ("export-unknown-model", lambda t: ["models", "export", "nope", "--out", str(t / "o")], r"unknown model 'nope'"),
    ("fetch-truncated", lambda t: ["models", "fetch", str(_truncated_gguf(t))], r"truncated GGUF file"),
    ("analyze-missing-grid", lambda t: ["analyze", str(t / "none.csv"), "--out", str(t / "a")], r"none.csv"),
    (
        "analyze-binary-grid",
        lambda t: ["analyze", str(_write_bytes(t / "g.csv", bytes(range(256)) * 8)), "--out", str(t / "a")],
        r"g.csv",
    ),
    (
        "analyze-bootstrap-zero",
        lambda t: ["analyze", "{out}/grid.csv", "--out", str(t / "a"), "--bootstrap", "0"],
        r"--bootstrap 0",
    ),
    ("analyze-theta", lambda t: ["analyze", "{out}/grid.csv", "--out", str(t / "a"), "--theta", "2"], r"--theta 2"),
    ("analyze-out-is-a-file", lambda t: ["analyze", "{out}/grid.csv", "--out", str(_write(t / "f", "x"))], r"f"),
    ("analyze-overflowing-n-items", lambda t: ["analyze", str(_overflow_grid(t)), "--out", str(t / "a")], r"n_items"),
    ("compare-one-grid", lambda t: ["compare", "{out}/grid.csv", "--out", str(t / "c")], r"at least two"),
    ("unknown-command-flag", lambda t: ["sweep", "--modles", "smollm2"], r"unrecognized arguments|--modles"),
]


def _two_model_grid(t: Path) -> Path:
    """The finished sweep's grid and items with a second model ("other", the same cells scored 1 - x), in t."""
    import pandas as pd

    if (t / "two" / "grid.csv").is_file():
        return t / "two" / "grid.csv"
    src = Path(os.environ["SR_FINISHED"])
    grid = pd.read_csv(src / "grid.csv")
    items = pd.read_parquet(src / "items.parquet")
    other = grid.assign(model="other", score=1 - grid["score"])
    d = _mkdir(t / "two")
    pd.concat([grid, other]).to_csv(d / "grid.csv", index=False)
    pd.concat([items, items.assign(model="other", item_score=1 - items["item_score"])]).to_parquet(d / "items.parquet")
    return d / "grid.csv"


def _items(t: Path, kind: str) -> Path:
    """The two-model grid's items, made to disagree with it: a model it lacks, an item id it never had, or
    one model's ids swapped for others in one configuration."""
    import pandas as pd

    items = pd.read_parquet(_two_model_grid(t).parent / "items.parquet").reset_index(drop=True)
    if kind == "ghost":
        items = pd.concat([items, items[items["model"] == "other"].assign(model="ghost")])
    elif kind == "ids":  # a record of an item no configuration has
        items = pd.concat([items, items.iloc[[0]].assign(item_id="no-such-item")])
    else:
        cid = items["config_id"].iloc[0]
        mask = (items["config_id"] == cid) & (items["model"] == "other")
        items.loc[mask, "item_id"] = [f"x{i}" for i in range(int(mask.sum()))]
    p = t / f"items-{kind}.parquet"
    items.reset_index(drop=True).to_parquet(p)
    return p


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def _write_bytes(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _other_rules(t: Path) -> Path:
    from safetyrepro.tasks.envelope import default_rules

    text = Path(default_rules().path).read_text().replace("moderate: {temperature: 0.3", "moderate: {temperature: 0.31")
    return _write(t / "rules.yaml", text)


def _hand_grid(t: Path) -> Path:
    d = _mkdir(t / "hand")
    _write(d / "grid.csv", "model\nhand-made\n")
    return d


def _altered_mirror(t: Path) -> Path:
    mirror = _mkdir(t / "mirror" / "xstest")
    src = Path(os.environ["SAFETYREPRO_DATA_DIR"]) / "xstest" / "xstest_prompts.csv"
    (mirror / "xstest_prompts.csv").write_bytes(src.read_bytes() + b"\n")
    return mirror.parent


def _overflow_grid(t: Path) -> Path:
    import pandas as pd

    from safetyrepro.tasks.envelope import Config, default_rules

    rules = default_rules()
    rows = []
    for m in ("a", "b"):
        for c in rules.configs("xstest", "conservative_core"):
            rows.append(
                {
                    "model": m,
                    "benchmark": "xstest",
                    "template": c.template,
                    "decoding": c.decoding,
                    "shots": c.shots,
                    "scoring": c.scoring,
                    "precision": "bf16",
                    "package": "lm-eval",
                    "n_items": "99999999999999999999999",
                    "n_seeds": 1,
                    "score": 0.5,
                    "parse_rate": 1.0,
                    "tier": rules.tier(c),
                    "config_id": Config.from_id(c.config_id).config_id,
                }
            )
    p = t / "overflow.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


def _plant(name: str, folder: Path, scratch: Path, outside: Path, cache: Path, monkeypatch) -> None:
    """Links from where SafetyRepro writes to a file and a folder outside (`outside`, whose files must
    be unchanged afterwards), and the other set-ups of the issue-23 cases."""
    ext_file, ext_dir = outside / "precious.txt", outside / "dir"
    model_dir = next((folder / "cells").iterdir())
    if name == "cache-dir-is-a-file":
        monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(_write(scratch / "cachefile", "x")))
    elif name == "cache-dir-under-a-file":
        monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(_write(scratch / "cachefile", "x") / "sub"))
    elif name == "outputs-cache-locked":
        from safetyrepro.sweep import outputs_cache

        monkeypatch.setattr(outputs_cache, "BUSY_TIMEOUT_S", 0.2)
        holder = sqlite3.connect(cache / "outputs.sqlite", isolation_level=None)
        holder.execute("CREATE TABLE IF NOT EXISTS outputs (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        holder.execute("BEGIN EXCLUSIVE")
        return holder
    elif name == "outputs-cache-is-a-symlink":
        (cache / "outputs.sqlite").symlink_to(ext_file)
    elif name == "cells-folder-is-a-symlink":
        shutil.copytree(folder / "cells", ext_dir / "cells")
        shutil.rmtree(folder / "cells")
        (folder / "cells").symlink_to(ext_dir / "cells")
    elif name == "model-folder-is-a-symlink":  # the tester's case: the linked folder's files were renamed
        shutil.copytree(model_dir, ext_dir / "m")
        _write(ext_dir / "m" / "unrelated.json", "{}")
        shutil.rmtree(model_dir)
        model_dir.symlink_to(ext_dir / "m")
    elif name == "cell-file-is-a-symlink":
        cell = sorted(model_dir.iterdir())[0]
        shutil.copy(cell, ext_dir / "cell.json")
        cell.unlink()
        cell.symlink_to(ext_dir / "cell.json")
    elif name == "grid-csv-is-a-symlink":
        shutil.copy(folder / "grid.csv", ext_dir / "grid.csv")
        (folder / "grid.csv").unlink()
        (folder / "grid.csv").symlink_to(ext_dir / "grid.csv")
    elif name == "logs-is-a-symlink":
        (folder / "logs").symlink_to(ext_dir)
    elif name == "analyze-out-holds-a-link":
        _mkdir(scratch / "a")
        (scratch / "a" / "figures").symlink_to(ext_dir)
        (scratch / "a" / "rho_flip.csv").symlink_to(ext_file)
    elif name in ("analyze-out-report-link", "compare-out-holds-a-link"):
        (_mkdir(scratch / "a") / ("report.md" if name.startswith("analyze") else "compare_report.md")).symlink_to(
            ext_file
        )
    elif name == "export-out-is-a-symlink":
        (scratch / "a").symlink_to(ext_dir)
    elif name == "crosspkg-out-holds-a-link":
        (_mkdir(scratch / "a") / "native").symlink_to(ext_dir)
    return None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    case, folder, finished, tmp_path, monkeypatch, capsys, data_dir
):
    name, make_argv, message = case
    scratch = _mkdir(tmp_path / "scratch")
    cache = _mkdir(tmp_path / "cache")
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(cache))
    monkeypatch.setenv("SR_FINISHED", str(finished))
    outside = _mkdir(tmp_path / "outside")
    _write(outside / "precious.txt", "not yours\n")
    _write(_mkdir(outside / "dir") / "keep.txt", "keep me\n")
    sqlite_holder = _plant(name, folder, scratch, outside, cache, monkeypatch)
    outside_before = _digest(outside)
    if name == "damaged-sweep-json":
        (folder / "sweep.json").write_text('{"rules_sha256": ')
    if name == "damaged-run-json":
        (folder / "run.json").write_text("[1, 2")
    if name == "corrupt-outputs-cache":
        (tmp_path / "cache" / "outputs.sqlite").write_bytes(b"this is not sqlite" * 100)
    if name == "outputs-cache-is-a-folder":
        _mkdir(tmp_path / "cache" / "outputs.sqlite")
    monkeypatch.setenv("SAFETYREPRO_DATA_DIR", os.environ["SAFETYREPRO_DATA_DIR"])  # main() may set it: restored after
    holder = None
    if name == "lock-is-a-symlink":  # planted to a file outside: it must not be truncated (the digest below)
        target = tmp_path / "outside.txt"
        target.write_text("not yours\n")
        (folder / ".lock").unlink(missing_ok=True)
        (folder / ".lock").symlink_to(target)
    if name == "sweep-in-use":
        holder = open(folder / ".lock", "a+")
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.truncate(0)
        holder.write(f"pid {os.getpid()}")
        holder.flush()
    argv = [a.replace("{out}", str(folder)) for a in make_argv(scratch)]
    if "--out" not in argv and argv[0] == "sweep":
        argv += ["--out", str(scratch / "never")]
    before = _digest(folder)
    try:
        with pytest.raises(SystemExit) as exit_info:  # argparse errors exit from inside main
            code = main(argv)
            raise SystemExit(code)
    finally:
        if holder is not None:
            holder.close()
        if sqlite_holder is not None:
            sqlite_holder.close()
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert exit_info.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("safetyrepro: error:"), err
    assert "Traceback" not in err
    import re

    assert re.search(message, lines[0]), lines[0]
    assert _digest(folder) == before
    assert not (scratch / "never").exists() and not (scratch / "new" / "sweep.json").exists()
    assert not list(folder.rglob("*.tmp"))
    if name == "lock-is-a-symlink":
        assert (tmp_path / "outside.txt").read_text() == "not yours\n"  # not truncated through the link
    assert _digest(outside) == outside_before  # nothing outside was written, renamed or removed through a link


@pytest.mark.parametrize(
    "name,make_dir,message",
    [
        ("data-dir-missing", lambda t: t / "nowhere", r"is not a directory"),
        ("data-dir-empty", lambda t: _mkdir(t / "empty-mirror"), r"missing xstest file xstest_prompts.csv"),
        ("data-file-altered", lambda t: _altered_mirror(t), r"xstest_prompts.csv"),
    ],
)
def test_data_mirror_problems_are_one_line(name, make_dir, message, tmp_path, data_dir):
    """In a fresh interpreter: the data is read once per process, so these cannot share one."""
    import re

    env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "safetyrepro.cli",
            "--data-dir",
            str(make_dir(tmp_path)),
            "items",
            "--benchmark",
            "xstest",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode == 2 and len(lines) == 1 and re.search(message, lines[0]), res.stderr


def test_envelope_into_a_closed_pipe_exits_0(data_dir):
    cmd = f"{sys.executable} -m safetyrepro.cli envelope --list | head -1; exit ${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() and res.stderr == ""


def test_lm_eval_refuses_shots_outside_the_envelope(data_dir):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "dummy",
            "--tasks",
            "safetyrepro_toxigen_t1",
            "--limit",
            "2",
            "--num_fewshot",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2
    assert "safetyrepro: error: --num_fewshot 4 is outside SafetyRepro's envelope; allowed: 0, 3, 5" in res.stderr
    assert "Traceback" not in res.stderr


def test_lm_eval_refuses_an_unknown_model_before_any_device_note(data_dir):
    """Under `lm_eval --model safetyrepro`, the refusal is the last line and comes before any word about
    the device (lm-eval's default cuda:0 on a machine without CUDA); lm-eval's own run log above it stays."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "safetyrepro",
            "--model_args",
            "model=nope",
            "--tasks",
            "safetyrepro_xstest_t1",
            "--limit",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode == 2, res.stderr
    assert lines[-1].startswith("safetyrepro: error: unknown model 'nope'"), res.stderr
    assert "cuda" not in res.stderr.lower() and "Traceback" not in res.stderr


def test_outputs_cache_full_stops_the_sweep_with_its_name(tmp_path):
    """sqlite's 'database or disk is full' during a write is the cache's failure, named with its fix."""
    from safetyrepro.sweep.outputs_cache import OutputsCache, OutputsCacheError

    cache = OutputsCache(tmp_path / "outputs.sqlite")
    conn = cache._conn()
    conn.execute("PRAGMA max_page_count = 1")  # the file may not grow: as a full disk does it
    with pytest.raises(OutputsCacheError, match=r"outputs.sqlite failed \(database or disk is full\); free disk space"):
        cache.put_many({f"k{i}": "x" * 10_000 for i in range(50)})
    assert sqlite3.connect(tmp_path / "outputs.sqlite").execute("SELECT COUNT(*) FROM outputs").fetchone() == (0,)


def test_colliding_labels_keep_both_models(tmp_path):
    """Labels that slug alike (`/x/a b.gguf`, `/x/a_b.gguf`) get cells of their own; a record stored under
    another key does not count as done."""
    store = Store(tmp_path)
    a, b = store.cell_path("/x/a b.gguf", "xstest__T1"), store.cell_path("/x/a_b.gguf", "xstest__T1")
    assert a != b and a.parent != b.parent
    store.commit("/x/a b.gguf", "xstest__T1", {"key": "/x/a b.gguf|xstest/T1", "status": "ok", "row": {}, "items": []})
    assert store.done("/x/a b.gguf", "xstest__T1", "/x/a b.gguf|xstest/T1") is not None
    assert store.done("/x/a_b.gguf", "xstest__T1", "/x/a_b.gguf|xstest/T1") is None
    b.parent.mkdir(parents=True)
    os.replace(a, b)  # a record under the wrong name
    assert store.done("/x/a_b.gguf", "xstest__T1", "/x/a_b.gguf|xstest/T1") is None


def test_damaged_cell_file_is_set_aside_not_deleted(tmp_path, capsys):
    store = Store(tmp_path)
    store.commit("m", "c", {"key": "m|c", "status": "ok", "row": {}, "items": []})
    path = store.cell_path("m", "c")
    path.write_text('{"key": "m|c", "status": "o')  # truncated
    assert store.done("m", "c", "m|c") is None
    aside = path.with_name(path.name + ".damaged-1")
    assert aside.read_text() == '{"key": "m|c", "status": "o' and not path.exists()
    assert "set aside as c.json.damaged-1, the cell is recomputed" in capsys.readouterr().err
    path.write_text("")  # zero bytes, a second time: another name, nothing overwritten
    assert store.records() == [] and path.with_name(path.name + ".damaged-2").exists() and aside.exists()


def test_cell_files_have_the_mode_of_plain_files(tmp_path):
    store = Store(tmp_path)
    store.commit("m", "c", {"key": "m|c", "status": "ok", "row": {"model": "m"}, "items": []})
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert store.cell_path("m", "c").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


def test_catalogue_has_at_least_60_cases():
    assert len(CASES) + 9 >= 60 and len({c[0] for c in CASES}) == len(CASES)


def test_sigterm_ends_with_one_line_and_exit_143():
    """SIGTERM (a scheduler's stop) ends a command as Ctrl-C does: one line saying the finished cells
    are kept, exit 143 (128 + 15), no traceback."""
    import subprocess
    import sys

    code = (
        "import argparse, os, signal, sys, time\n"
        "from safetyrepro import cli\n"
        "p = argparse.ArgumentParser(); p.add_argument('--data-dir'); p.add_argument('-v', '--verbose', "
        "action='store_true')\n"
        "p.set_defaults(func=lambda a: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(30))\n"
        "cli.build_parser = lambda: p\n"
        "sys.exit(cli.main([]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip().splitlines() == [
        "safetyrepro: terminated (SIGTERM); finished cells are kept, rerun the same command to resume"
    ]


def test_an_empty_items_file_is_a_warning_not_an_internal_error(finished, tmp_path, monkeypatch, capsys, data_dir):
    """Per-item records with no rows (a grid whose runs logged none) leave the item tests out, said in
    one warning line; before, a zip over the empty configurations ended in an internal error."""
    import pandas as pd

    monkeypatch.setenv("SR_FINISHED", str(finished))
    grid = _two_model_grid(_mkdir(tmp_path / "s"))
    items = pd.read_parquet(grid.parent / "items.parquet").iloc[:0]
    items.to_parquet(tmp_path / "empty.parquet")
    code = main(
        [
            "analyze",
            str(grid),
            "--items",
            str(tmp_path / "empty.parquet"),
            "--out",
            str(tmp_path / "a"),
            "--no-figures",
            "--bootstrap",
            "20",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "holds no records for this grid's models and configurations" in err and "Traceback" not in err
