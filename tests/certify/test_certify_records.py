"""`certify --records PATH`: which earlier records a live run takes as evaluated, and which it refuses
(no model runs here: the checks happen before any model loads)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from safetyrepro.certify.live import LiveOracle
from safetyrepro.certify.resume import earlier_source, same_command, same_why
from safetyrepro.errors import UserError
from safetyrepro.sweep.plan import Cell

SPEC = SimpleNamespace(
    models=("a", "b"),
    model_specs=("smollm2", "gemma3-270m"),
    package="lm-eval",
    precision="fp32",
    tie_rule="expected",
    rules_sha256="r1",
    limit=None,
    fewshot_draw="fixed",
)
MADE = {
    "models": ["a", "b", "c"],
    "model_specs": ["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b"],
    "package": "lm-eval",
    "precision": "fp32",
    "tie_rule": "expected",
    "rules_sha256": "r1",
    "limit": 24,
}


def _sweep_folder(tmp_path, made=MADE):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(made))
    pd.DataFrame(
        {
            "model": ["a"],
            "config_id": ["x/T1/greedy/0shot/logprob"],
            "item_id": ["i0"],
            "seed": [0],
            "item_score": [1.0],
        }
    ).to_parquet(folder / "items.parquet")
    return folder


def test_a_sweep_made_the_same_way_is_taken_whatever_its_limit_and_other_models(tmp_path):
    folder = _sweep_folder(tmp_path)
    for given in (folder, folder / "items.parquet"):
        items, made = earlier_source(given, SPEC)
        assert items == folder / "items.parquet" and made["sweep_folder"] == str(folder)
    assert same_command(MADE, SPEC)


@pytest.mark.parametrize(
    "change, said",
    [
        ({"precision": "bf16"}, "precision was 'bf16'"),
        ({"rules_sha256": "r2"}, "rules_sha256 was 'r2'"),
        ({"model_specs": ["smollm2", "/models/other", "q"]}, "the spec of 'b' was '/models/other'"),
        ({"models": ["x", "y", "z"]}, "it shares no model with this run"),
        ({"fewshot_draw": "per_item"}, "fewshot_draw was 'per_item'"),  # a record without the key: the fixed draw
    ],
)
def test_records_made_another_way_are_refused_naming_the_difference(tmp_path, change, said):
    folder = _sweep_folder(tmp_path, {**MADE, **change})
    with pytest.raises(UserError, match="made another way") as e:
        earlier_source(folder, SPEC)
    assert said in str(e.value) and said in same_why({**MADE, **change}, SPEC)


def test_records_whose_making_is_unknown_are_refused(tmp_path):
    folder = _sweep_folder(tmp_path)
    (folder / "sweep.json").unlink()
    with pytest.raises(UserError, match="neither a sweep.json nor a live certify run's cost.json"):
        earlier_source(folder, SPEC)
    with pytest.raises(UserError, match="no items file there"):
        earlier_source(tmp_path / "nowhere", SPEC)


def test_kept_records_count_once_and_only_for_this_runs_cells_seeds_and_items():
    cfg = SimpleNamespace(
        config_id="x/T1/diverse/0shot/free_form", benchmark="x", scoring="free_form", precision="fp32"
    )
    sweep = SimpleNamespace(cells=[Cell(m, cfg, (0, 1)) for m in ("a", "b")], spec=SPEC)
    oracle = LiveOracle(sweep)
    rows = [
        {"model": "a", "config_id": cfg.config_id, "item_id": i, "seed": s, "item_score": 1.0}
        for i in ("i0", "i1")
        for s in (0, 1)
    ]
    rows += rows[:2]  # the same records again (a second --records folder)
    rows += [
        {"model": "a", "config_id": cfg.config_id, "item_id": "i0", "seed": 7, "item_score": 0.0},  # not a seed
        {"model": "a", "config_id": cfg.config_id, "item_id": "zz", "seed": 0, "item_score": 0.0},  # not an item
        {"model": "c", "config_id": cfg.config_id, "item_id": "i0", "seed": 0, "item_score": 0.0},
    ]  # not a model
    assert oracle.keep_earlier(pd.DataFrame(rows), {"i0", "i1", "i2"}) == 2
    assert oracle.held("x", cfg.config_id, "a", ["i0", "i1", "i2"]) == 2
    assert oracle.held("x", cfg.config_id, "b", ["i0"]) == 0
    assert len(oracle.records()) == 4
