"""HELM runs reach the analysis through Every Eval Ever: tests/eee/fixtures/helm_eee/ is the output of
EEE's own HELM converter on six small HELM run folders (fixtures/README.md); `import eee` with a
mapping file places them, and `analyze` reads the grid. Runs without .venv-eee (the converted records
are committed)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from safetyrepro.cli import main
from safetyrepro.eee.venv import eee_python

FIXTURES = Path(__file__).parent / "fixtures"
HELM = FIXTURES / "helm_eee"
MAPPING = FIXTURES / "helm_mapping.yaml"
A, B = "toy-org/toy-model-a", "toy-org/toy-model-b"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("helm") / "grid"
    assert main(["import", "eee", str(HELM), "--mapping", str(MAPPING), "--out", str(out)]) == 0
    return out


def test_helm_records_import_into_a_grid_with_their_items(imported):
    grid = pd.read_csv(imported / "grid.csv")
    assert sorted(grid["model"].unique()) == [A, B]
    assert set(grid["benchmark"]) == {"safety_mcq"} and set(grid["package"]) == {"helm"}
    assert set(grid["template"]) == {"helm-mcq"} and set(grid["shots"]) == {0}
    # the three HELM settings are three configurations: greedy and T=0.7, and the max_tokens that differ
    decodings = sorted(grid["decoding"].unique())
    assert len(decodings) == 3
    assert [d.split("+")[0] for d in decodings] == ["greedy", "greedy", "t0.7-p1"]
    assert sum("max_tokens=5" in d for d in decodings) == 1

    def setting(decoding: str) -> str:
        return "greedy5" if "max_tokens=5" in decoding else decoding.split("+")[0]

    scores = {(r.model, setting(r.decoding)): r.score for r in grid.itertuples()}
    assert scores == {
        (A, "greedy"): 0.75,
        (A, "greedy5"): 0.25,
        (A, "t0.7-p1"): 0.5,
        (B, "greedy"): 0.5,
        (B, "greedy5"): 0.75,
        (B, "t0.7-p1"): 0.5,
    }
    items = pd.read_parquet(imported / "items.parquet")
    assert len(items) == 24 and set(items["item_id"]) == {"id0", "id1", "id2", "id3"}
    assert (grid["items"] == "yes").all()
    rules = (imported / "rules.yaml").read_text()
    assert "external_benchmarks:\n- safety_mcq" in rules
    prov = pd.read_csv(imported / "provenance.csv")
    assert (prov["status"] == "imported").sum() == 12  # six records, six samples files
    run = json.loads((imported / "run.json").read_text())
    assert run["source"] == "safetyrepro import eee" and run["packages"] == {"eee": "unknown"}


def test_helm_grid_analyzes_with_a_rank_flip(imported):
    out = imported / "analysis"
    assert main(["analyze", str(imported / "grid.csv"), "--out", str(out), "--no-figures", "--bootstrap", "1"]) == 0
    flip = pd.read_csv(out / "rho_flip.csv")
    full = flip[flip["slice"] == "full"].iloc[0]
    # A wins greedy max_tokens=1, B wins max_tokens=5, they tie at T=0.7
    assert (full.model_a, full.model_b, full.n_plus, full.n_minus, full.n_zero, full.n_configs) == (A, B, 1, 1, 1, 3)
    assert full.rho_flip == pytest.approx(1 / 3)
    assert (out / "significant_flips.csv").is_file()


def test_without_a_mapping_nothing_is_guessed(tmp_path, capsys):
    assert main(["import", "eee", str(HELM), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert "nothing to import: 6 unmapped" in err and "safety_mcq" in err and "--mapping" in err


def test_a_lower_is_better_metric_of_an_external_benchmark_is_not_imported(tmp_path, capsys):
    """An external benchmark is read higher-is-better, so a metric that says otherwise stays unmapped."""
    copy = tmp_path / "data" / "safety_mcq" / "toy-org" / "toy-model-a"
    copy.mkdir(parents=True)
    record = sorted((HELM / "data" / "safety_mcq" / "toy-org" / "toy-model-a").glob("*.json"))[0]
    data = json.loads(record.read_text())
    data["evaluation_results"][0]["metric_config"]["lower_is_better"] = True
    data.pop("detailed_evaluation_results")
    (copy / record.name).write_text(json.dumps(data))
    assert main(["import", "eee", str(tmp_path / "data"), "--mapping", str(MAPPING), "--out", str(tmp_path / "g")]) == 2
    assert "lower-is-better" in capsys.readouterr().err


@pytest.mark.needs_setup
@pytest.mark.skipif(eee_python() is None, reason=".venv-eee is absent: `make eee` builds EEE's HELM converter")
def test_the_fixture_is_what_eees_helm_converter_makes_of_the_runs(tmp_path):
    """Regenerate the HELM run folders and convert them again with the real converter: the records match
    the committed ones except for the converter's fresh UUIDs and retrieval time."""
    import subprocess

    target = tmp_path / "fixture"
    done = subprocess.run(
        [str(eee_python()), str(FIXTURES / "make_helm_fixture.py"), str(tmp_path / "work"), str(target)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    def shape(root: Path) -> list:
        out = []
        for p in sorted(root.rglob("*.json")):
            d = json.loads(p.read_text())
            d.pop("retrieved_timestamp")
            d.pop("detailed_evaluation_results")
            rows = [json.loads(x) for x in p.with_name(p.stem + "_samples.jsonl").read_text().splitlines()]
            out.append((p.parent.relative_to(root).as_posix(), d, rows))
        return sorted(out, key=lambda t: (t[0], t[1]["evaluation_id"]))

    assert shape(target) == shape(HELM)


def test_the_imported_helm_grid_goes_out_and_back_in_unchanged(imported, tmp_path):
    """A grid under a widened rules file (an external benchmark, decodings named by their settings)
    exports under that rules file and imports again to the same rules and the same rho_flip.csv."""
    if not (imported / "analysis" / "rho_flip.csv").is_file():
        assert (
            main(
                [
                    "analyze",
                    str(imported / "grid.csv"),
                    "--out",
                    str(imported / "analysis"),
                    "--no-figures",
                    "--bootstrap",
                    "1",
                ]
            )
            == 0
        )
    assert main(["export", "eee", str(imported / "grid.csv"), "--out", str(tmp_path / "eee")]) == 0
    rec = json.loads(sorted((tmp_path / "eee" / "data").rglob("*.json"))[0].read_text())
    assert rec["model_info"]["id"] in (A, B) and rec["model_info"]["developer"] == "toy-org"
    assert rec["eval_library"]["name"] == "helm"
    assert main(["import", "eee", str(tmp_path / "eee"), "--out", str(tmp_path / "back")]) == 0
    assert (tmp_path / "back" / "rules.yaml").read_bytes() == (imported / "rules.yaml").read_bytes()
    assert (
        main(
            [
                "analyze",
                str(tmp_path / "back" / "grid.csv"),
                "--out",
                str(tmp_path / "analysis"),
                "--no-figures",
                "--bootstrap",
                "1",
            ]
        )
        == 0
    )
    assert (tmp_path / "analysis" / "rho_flip.csv").read_bytes() == (
        imported / "analysis" / "rho_flip.csv"
    ).read_bytes()
