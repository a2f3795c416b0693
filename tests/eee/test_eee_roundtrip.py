"""EEE out and back in without Every Eval Ever installed: `export eee` -> `import eee` -> `analyze`
reproduces the original rho_flip.csv byte for byte, and the records carry the fields docs/eee.md maps."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from eee_grids import FAILED, write_grid

from safetyrepro.cli import main
from safetyrepro.importers import eee_format as R


def _analyze(grid: Path, out: Path) -> Path:
    assert main(["analyze", str(grid), "--out", str(out), "--no-figures", "--bootstrap", "1"]) == 0
    return out / "rho_flip.csv"


@pytest.fixture(scope="module")
def trip(tmp_path_factory):
    """The synthetic grid, its export, the import of the export, and both analyses."""
    root = tmp_path_factory.mktemp("eee")
    grid = write_grid(root / "run")
    assert main(["export", "eee", str(grid), "--out", str(root / "eee"), "--timestamp", "1767225600"]) == 0
    assert main(["import", "eee", str(root / "eee"), "--out", str(root / "back")]) == 0
    return {
        "root": root,
        "grid": grid,
        "eee": root / "eee",
        "back": root / "back",
        "original": _analyze(grid, root / "run" / "analysis"),
        "reimported": _analyze(root / "back" / "grid.csv", root / "back" / "analysis"),
    }


def _records(folder: Path) -> list[tuple[Path, dict]]:
    return [(p, json.loads(p.read_text())) for p in sorted((folder / "data").rglob("*.json"))]


def test_export_import_analyze_reproduces_rho_flip_csv_byte_for_byte(trip):
    assert trip["original"].read_bytes() == trip["reimported"].read_bytes()
    verdicts = json.loads((trip["eee"] / R.VERDICTS_FILE).read_text())
    (group,) = verdicts["groups"]
    assert group["rho_flip_csv"].encode() == trip["original"].read_bytes()  # the verdict file holds the same table
    csv = pd.read_csv(trip["original"])
    rows = pd.DataFrame(group["rho_flip"])  # rho_flip.csv's rows, and what their configurations' leads rest on
    assert rows[list(csv.columns)].equals(csv)
    assert list(rows.columns[len(csv.columns) :]) == ["n_format_driven", "n_uninformative", "rests_on"]
    assert {r["slice"] for r in group["rho_flip_max"]} >= {"full", "core"}


def test_the_reimported_grid_has_the_original_cells(trip):
    original = pd.read_csv(trip["grid"])
    ok = original[original["status"] == "ok"]
    back = pd.read_csv(trip["back"] / "grid.csv")
    key = ["model", "config_id"]
    merged = ok.merge(back, on=key, suffixes=("", "_back"), validate="one_to_one")
    assert len(merged) == len(ok) == len(back)
    for column in (
        "benchmark",
        "template",
        "decoding",
        "shots",
        "scoring",
        "precision",
        "package",
        "n_items",
        "n_seeds",
        "tier",
    ):
        assert (merged[column] == merged[f"{column}_back"]).all(), column
    assert (merged["score"] - merged["score_back"]).abs().max() < 1e-12
    items = pd.read_parquet(trip["root"] / "run" / "items.parquet")
    items_back = pd.read_parquet(trip["back"] / "items.parquet")
    cols = [
        "model",
        "config_id",
        "item_id",
        "seed",
        "item_score",
        "prediction",
        "gold",
        "parsed",
        "raw_output",
        "prompt_sha256",
    ]
    a = items[cols].sort_values(cols[:4]).reset_index(drop=True)
    b = items_back[cols].sort_values(cols[:4]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a.astype(str), b.astype(str))


def test_one_record_per_ok_cell_and_the_failed_cell_listed(trip):
    recs = _records(trip["eee"])
    original = pd.read_csv(trip["grid"])
    assert len(recs) == int((original["status"] == "ok").sum())
    verdicts = json.loads((trip["eee"] / R.VERDICTS_FILE).read_text())
    assert [(c["model"], c["config_id"], c["status"]) for c in verdicts["cells_not_exported"]] == [(*FAILED, "failed")]
    names = {p.name for p, _ in recs}
    assert len(names) == len(recs) and all(R.UUID_FILE.fullmatch(n[:-5]) for n in names)


def test_a_record_carries_the_configuration_decoding_and_uncertainty(trip):
    from safetyrepro.tasks.envelope import default_rules

    rules = default_rules()
    items = pd.read_parquet(trip["root"] / "run" / "items.parquet")
    cfg_id = "truthfulqa/T2/moderate/3shot/free_form"
    ((path, rec),) = [
        (p, r)
        for p, r in _records(trip["eee"])
        if r["evaluation_results"][0]["evaluation_result_id"] == cfg_id and r["model_info"]["name"] == "alpha"
    ]
    assert path.relative_to(trip["eee"]).parts[:4] == ("data", "truthfulqa", "safetyrepro", "alpha")
    (res,) = rec["evaluation_results"]
    args, details = res["generation_config"]["generation_args"], res["generation_config"]["additional_details"]
    assert (args["temperature"], args["top_p"]) == (
        rules.decodings["moderate"].temperature,
        rules.decodings["moderate"].top_p,
    )
    assert args["max_tokens"] == rules.max_new("T2") and "{question}" in args["prompt_template"]
    assert details[R.K_CONFIG_ID] == cfg_id and details[R.K_SHOTS] == "3" and details[R.K_NUM_FEWSHOT] == "3"
    assert (details[R.K_TEMPLATE], details[R.K_DECODING], details[R.K_SCORING]) == ("T2", "moderate", "free_form")
    assert details[R.K_RULES_SHA] == rules.sha256 == rec["source_metadata"]["additional_details"][R.K_RULES_SHA]
    assert json.loads(details[R.K_SEEDS]) == list(rules.seeds("moderate"))
    cell = items[(items["model"] == "alpha") & (items["config_id"] == cfg_id)]
    per_item = cell.groupby("item_id")["item_score"].mean()
    unc = res["score_details"]["uncertainty"]
    assert unc["num_samples"] == len(per_item) == 8
    assert math.isclose(unc["standard_error"]["value"], per_item.std(ddof=1) / math.sqrt(len(per_item)))
    seed_scores = json.loads(res["score_details"]["details"][R.K_SEED_SCORES])
    assert len(seed_scores) == 5 and math.isclose(sum(seed_scores.values()) / 5, res["score_details"]["score"])
    assert (
        rec["eval_library"]["name"] == "lm_eval" and rec["eval_library"]["additional_details"][R.K_PACKAGE] == "lm-eval"
    )
    lines = [json.loads(x) for x in (path.parent / f"{path.stem}_samples.jsonl").read_text().splitlines()]
    assert len(lines) == len(cell) == rec["detailed_evaluation_results"]["total_rows"]
    assert {x["evaluation_id"] for x in lines} == {rec["evaluation_id"]}
    assert {x["metadata"]["seed"] for x in lines} == {str(s) for s in rules.seeds("moderate")}


def test_crows_pairs_direction_and_hf_style_ids(trip):
    recs = _records(trip["eee"])
    crows = [r for _, r in recs if r["evaluation_results"][0]["evaluation_name"] == "crows_pairs"]
    mc = crows[0]["evaluation_results"][0]["metric_config"]
    assert mc["lower_is_better"] is False and mc["additional_details"][R.K_BETTER] == "closer_to_0.5"
    assert mc["metric_id"] == "safetyrepro.crows_pairs.score"
    gamma = {r["model_info"]["id"] for _, r in recs if r["model_info"]["name"] == "org/gamma-1b"}
    assert gamma == {"org/gamma-1b"}


def test_export_is_reproducible_and_replaces_only_its_own_folder(trip, tmp_path):
    out = tmp_path / "again"
    assert main(["export", "eee", str(trip["grid"]), "--out", str(out), "--timestamp", "1767225600"]) == 0
    first = {p.relative_to(trip["eee"]): p.read_bytes() for p in trip["eee"].rglob("*") if p.is_file()}
    second = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert first.keys() == second.keys()
    assert all(first[k] == second[k] for k in first if k.name != R.VERDICTS_FILE)
    # an earlier export is replaced whole; a folder that is not one is refused
    (out / "data" / "stray.txt").write_text("x")
    assert main(["export", "eee", str(trip["grid"]), "--out", str(out)]) == 0
    assert not (out / "data" / "stray.txt").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["export", "eee", str(trip["grid"]), "--out", str(other)]) == 2
    assert (other / "notes.txt").read_text() == "mine"


def test_a_changed_samples_file_is_a_bad_input(trip, tmp_path, capsys):
    copy = tmp_path / "eee"
    shutil.copytree(trip["eee"], copy)
    samples = sorted((copy / "data").rglob("*_samples.jsonl"))[0]
    samples.write_text(samples.read_text().replace('"interaction_type"', ' "interaction_type"', 1))  # still JSON
    assert main(["import", "eee", str(copy), "--out", str(tmp_path / "back")]) == 2
    assert "the file changed since the record was written" in capsys.readouterr().err
    assert main(["import", "eee", str(copy), "--out", str(tmp_path / "back"), "--skip-bad"]) == 0
    bad = pd.read_csv(tmp_path / "back" / "bad_inputs.csv")
    assert list(bad["path"]) == [str(samples)]


def test_provenance_names_every_record_and_samples_file_with_its_sha256(trip):
    import hashlib

    prov = pd.read_csv(trip["back"] / "provenance.csv")
    files = sorted(p for p in (trip["eee"] / "data").rglob("*") if p.is_file())
    assert sorted(prov["path"]) == sorted(map(str, files))
    for row in prov.itertuples():
        assert row.sha256 == hashlib.sha256(Path(row.path).read_bytes()).hexdigest()
        assert row.status == "imported"
    assert set(prov["kind"]) == {"eee record", "eee samples"}


def test_an_lm_eval_record_of_a_safetyrepro_task_needs_no_mapping(tmp_path):
    """A converter's lm_eval record named like SafetyRepro's own lm-eval task is placed by the name,
    as `import lm-eval` places it; its shot count is the converter's num_fewshot."""
    folder = tmp_path / "data" / "xstest" / "org" / "m"
    folder.mkdir(parents=True)
    record = {
        "schema_version": "0.3.0",
        "evaluation_id": "xstest/org_m/1",
        "retrieved_timestamp": "1767225600",
        "source_metadata": {
            "source_type": "evaluation_run",
            "source_organization_name": "x",
            "evaluator_relationship": "third_party",
        },
        "eval_library": {"name": "lm_eval", "version": "0.4.13"},
        "model_info": {
            "name": "org/m",
            "id": "org/m",
            "additional_details": {"deployment_type": "unknown", "model_availability": "unknown"},
        },
        "evaluation_results": [
            {
                "evaluation_result_id": "acc",
                "evaluation_name": "safetyrepro_xstest_t1",
                "source_data": {"dataset_name": "xstest", "source_type": "other"},
                "metric_config": {
                    "metric_id": "accuracy",
                    "lower_is_better": False,
                    "score_type": "continuous",
                    "min_score": 0,
                    "max_score": 1,
                },
                "score_details": {"score": 0.5, "uncertainty": {"num_samples": 6}},
                "generation_config": {"generation_args": {}, "additional_details": {"num_fewshot": "3"}},
            }
        ],
    }
    (folder / "0a1b2c3d-1111-4222-8333-444455556666.json").write_text(json.dumps(record))
    assert main(["import", "eee", str(tmp_path / "data"), "--out", str(tmp_path / "g")]) == 0
    (row,) = pd.read_csv(tmp_path / "g" / "grid.csv").itertuples()
    assert (row.model, row.config_id, row.package, row.n_items) == (
        "org/m",
        "xstest/T1/greedy/3shot/logprob",
        "lm-eval",
        6,
    )
