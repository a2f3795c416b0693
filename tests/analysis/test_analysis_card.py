import json

from analysis_grids import CC, grid_frame, write

from safetyrepro.analysis.metrics.slices import slice_names
from safetyrepro.analysis.pipeline import AnalysisOptions, run_analysis
from safetyrepro.analysis.render.card import card_markdown, grid_card
from safetyrepro.grid.grid_io import load_grid


def _analysis(rules, path):
    frame = grid_frame(
        {
            "a": dict(zip(CC, [0.6, 0.4, 0.7, 0.2], strict=True)),
            "b": dict(zip(CC, [0.5, 0.5, 0.6, 0.2], strict=True)),
            "c": dict(zip(CC, [0.1, 0.9, 0.8, 0.0], strict=True)),
        },
        parse_rate={("a", CC[2]): 0.9},
    )
    write(frame, path)
    return run_analysis(load_grid(path, rules), rules, AnalysisOptions(slices=slice_names(rules), n_resamples=10))


def test_card_without_run_json_says_so(rules, tmp_path):
    path = tmp_path / "grid.csv"
    card = grid_card(_analysis(rules, path), path)
    assert card["run_metadata"]["found"] is False
    assert card["models"][:2] == [{"label": "a", "weights_sha256": None}, {"label": "b", "weights_sha256": None}]
    text = card_markdown(card)
    assert "No run.json beside grid.csv" in text and "| a | unknown |" in text
    caveats = " ".join(card["caveats"])
    # a vs c and b vs c split 2-2 at |C|=4: the maximum sits at the ceiling on full and conservative_core
    assert "Saturated (a reversal exists, its size is unknown): truthfulqa/full, truthfulqa/core" in caveats
    assert "1 pair(s) on slice full have ties: truthfulqa a/b (1)" in caveats  # config 4
    assert "truthfulqa min 0.90, 1 of 4 configs below 0.95" in caveats
    head = card["headline"][0]
    # orderings: a>b>c, c>b>a, c>a>b, and a>b>c again (the a/b tie on config 4 broken alphabetically)
    assert (head["benchmark"], head["n_configs"], head["rho_flip_max"], head["pairs"], head["n_orderings"]) == (
        "truthfulqa",
        4,
        0.5,
        "a vs c; b vs c",
        3,
    )


def test_card_reads_run_json_and_flags_a_rules_mismatch(rules, tmp_path):
    path = tmp_path / "grid.csv"
    analysis = _analysis(rules, path)
    meta = {
        "rules_sha256": rules.sha256,
        "models": [{"label": "a", "weights_sha256": "ab" * 32, "source": "hub/a"}],
        "item_subsets": {"truthfulqa": "tqa-42-295"},
        "packages": {"lm-eval": "0.4.8"},
        "machine": "H200",
    }
    (tmp_path / "run.json").write_text(json.dumps(meta))
    card = grid_card(analysis, path)
    assert card["envelope"]["rules_match"] is True and card["machine"] == "H200"
    assert card["models"][0] == {"label": "a", "weights_sha256": "ab" * 32, "source": "hub/a"}
    assert card["benchmarks"][0]["item_subset"] == "tqa-42-295" and card["packages"] == {"lm-eval": "0.4.8"}
    assert "(matches run.json)" in card_markdown(card)
    (tmp_path / "run.json").write_text(json.dumps({**meta, "rules_sha256": "0" * 64}))
    card = grid_card(analysis, path)
    assert card["envelope"]["rules_match"] is False
    assert "MISMATCH" in card_markdown(card) and any("run under rules 000000000000" in c for c in card["caveats"])


def test_card_names_embedded_models_from_the_grid_and_prints_the_machine_as_text(rules, tmp_path):
    """A sweep that found a model's cells cached records only its label in run.json (study: smollm2,
    gemma3-270m); the grid's weights_sha256 column still names the weights, and an embedded model's
    sha256 says which backend ran it. The machine reads as text, not a Python dict."""
    import pandas as pd

    from safetyrepro.adapters.catalogue.weights import EMBEDDED

    path = tmp_path / "grid.csv"
    analysis = _analysis(rules, path)
    frame = pd.read_csv(path)
    frame["weights_sha256"] = frame["model"].map({"a": EMBEDDED["smollm2"].sha256, "b": "cd" * 32, "c": None})
    frame.to_csv(path, index=False)
    meta = {
        "models": [{"label": "a"}, {"label": "b"}, {"label": "c"}],
        "machine": {"platform": "Linux-6.1-x86_64", "python": "3.11.7", "processor": "x86_64", "cpus": 2}
        | {"memory_bytes": int(23.4 * 2**30)},
    }
    (tmp_path / "run.json").write_text(json.dumps(meta))
    card = grid_card(analysis, path)
    text = card_markdown(card)
    assert f"| a | engine `smollm2` (nf4) | {EMBEDDED['smollm2'].sha256} | none |" in text
    assert f"| b | unknown | {'cd' * 32} | none |" in text  # weights known, backend not: said as such
    assert "| c | unknown | unknown | none |" in text
    assert "- Machine: 2 cores, 23.4 GiB, x86_64, Linux-6.1-x86_64, Python 3.11.7" in text
