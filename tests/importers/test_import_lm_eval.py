"""`safetyrepro import lm-eval`: folders laid out like real lm-eval output (lm_eval_fixtures.py) become
a grid `safetyrepro analyze` reads, with the axes each run recorded, the disagreements kept apart,
duplicates handled by flag and bad input refused in one line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from lm_eval_fixtures import SMOL_SHA, XSTEST_IDS, write_run

from safetyrepro.cli import main
from safetyrepro.tasks.envelope import RULES_PATH

SIXTHS = {k: [1.0] * k + [0.0] * (6 - k) for k in range(7)}  # k of 6 items right


def imp(tmp_path: Path, *paths, out: str = "out", args: tuple = ()) -> tuple[int, Path]:
    out_dir = tmp_path / out
    return main(["import", "lm-eval", *map(str, paths), "--out", str(out_dir), *args]), out_dir


def grid(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "grid.csv", dtype={"model": str})


HF = dict(
    model_kind="hf",
    model="/models/other",
    model_args={"pretrained": "/models/other", "dtype": "bfloat16"},
    weights=None,
)


def two_models_four_configs(root: Path) -> None:
    """smollm2 (the engine) and an HF folder, each at 0 and 3 shots, with and without the chat template.
    Configs in order: T1 0-shot, T1 3-shot, T1+nochat 0-shot, T1+nochat 3-shot."""
    smol = [4, 3, 2, 5]
    other = [3, 4, 2, 1]
    i = 0
    for scores, kw, name in ((smol, {}, "smol"), (other, HF, "other")):
        for k, (shots, chat) in enumerate([(0, True), (3, True), (0, False), (3, False)]):
            write_run(root, scores=SIXTHS[scores[k]], shots=shots, chat=chat, i=i, folder=f"{name}/{k}", **kw)
            i += 1


def test_two_models_import_and_analyze_with_the_numbers_by_hand(tmp_path, capsys):
    two_models_four_configs(tmp_path / "runs")
    code, out = imp(tmp_path, tmp_path / "runs")
    assert code == 0
    g = grid(out)
    assert list(g.columns[:15]) == [
        "model",
        "benchmark",
        "template",
        "decoding",
        "shots",
        "scoring",
        "precision",
        "package",
        "n_items",
        "n_seeds",
        "score",
        "parse_rate",
        "tier",
        "config_id",
        "status",
    ]
    assert sorted(g["model"].unique()) == ["hf:/models/other", "smollm2"]
    assert sorted(g["config_id"].unique()) == [
        "xstest/T1+nochat/greedy/0shot/logprob",
        "xstest/T1+nochat/greedy/3shot/logprob",
        "xstest/T1/greedy/0shot/logprob",
        "xstest/T1/greedy/3shot/logprob",
    ]
    score = g.set_index(["model", "config_id"])["score"]
    assert score[("smollm2", "xstest/T1/greedy/3shot/logprob")] == 0.5
    assert score[("hf:/models/other", "xstest/T1+nochat/greedy/3shot/logprob")] == 1 / 6
    assert set(g["precision"]) == {"bf16"} and set(g["package"]) == {"lm-eval"} and set(g["n_items"]) == {6}
    # T1+nochat is not in the packaged envelope: the grid comes with its own rules file
    rules = (out / "rules.yaml").read_bytes()
    assert rules != RULES_PATH.read_bytes() and b"T1+nochat" in rules
    items = pd.read_parquet(out / "items.parquet")
    assert len(items) == 2 * 4 * 6 and set(items["item_id"]) == set(XSTEST_IDS)
    means = items.groupby(["model", "config_id"])["item_score"].mean()
    assert (means - score.reindex(means.index)).abs().max() == 0
    capsys.readouterr()
    assert (
        main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures", "--bootstrap", "50"])
        == 0
    )
    assert "rules file beside the grid" in capsys.readouterr().err
    rho = pd.read_csv(tmp_path / "an" / "rho_flip.csv")
    full = rho[rho["slice"] == "full"].iloc[0]
    # model_a = hf:/models/other: 3<4 (-), 4>3 (+), 2=2 (0), 1<5 (-)
    assert (full["model_a"], full["n_plus"], full["n_minus"], full["n_zero"], full["rho_flip"]) == (
        "hf:/models/other",
        1,
        2,
        1,
        0.25,
    )
    assert (tmp_path / "an" / "significant_flips.csv").is_file()
    card = json.loads((tmp_path / "an" / "grid_card.json").read_text())
    assert card["envelope"]["rules_match"] is True  # run.json names the rules file the grid was analysed under


def test_safetyrepro_configurations_only_keep_the_packaged_rules(tmp_path):
    for i, (model, shots, k) in enumerate([("smollm2", 0, 4), ("smollm2", 3, 2), ("qwen", 0, 3), ("qwen", 3, 3)]):
        write_run(
            tmp_path / "runs", scores=SIXTHS[k], shots=shots, model=model, weights=None, i=i, folder=f"{model}{shots}"
        )
    code, out = imp(tmp_path, tmp_path / "runs")
    assert code == 0
    assert (out / "rules.yaml").read_bytes() == RULES_PATH.read_bytes()
    from safetyrepro.tasks.envelope import default_rules

    assert json.loads((out / "run.json").read_text())["rules_sha256"] == default_rules().sha256
    assert (
        main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures", "--bootstrap", "20"])
        == 0
    )
    rho = pd.read_csv(tmp_path / "an" / "rho_flip.csv")
    full = rho[rho["slice"] == "full"].iloc[0]
    assert (full["model_a"], full["n_plus"], full["n_minus"]) == ("qwen", 1, 1)  # 3<4, 3>2


def test_decoding_system_text_multiturn_and_precision_come_from_what_the_run_recorded(tmp_path):
    runs = tmp_path / "runs"
    gen = dict(task="safetyrepro_xstest_t2_gen", output_type="generate_until")
    write_run(
        runs,
        scores=SIXTHS[3],
        i=0,
        folder="a",
        gen_kwargs={"temperature": 0.3, "top_p": 0.9, "do_sample": True, "seed": 2},
        **gen,
    )
    write_run(
        runs,
        scores=SIXTHS[5],
        i=1,
        folder="b",
        gen_kwargs={"temperature": 0.3, "top_p": 0.9, "do_sample": True, "seed": 4},
        **gen,
    )
    write_run(runs, scores=SIXTHS[1], i=2, folder="c", gen_kwargs={"temperature": 0.5, "do_sample": True}, **gen)
    write_run(runs, scores=SIXTHS[2], i=3, folder="d", gen_kwargs={"max_gen_toks": 32}, **gen)
    write_run(runs, scores=SIXTHS[4], i=4, folder="e", system_instruction="Be brief.", shots=3, multiturn=False)
    write_run(runs, scores=SIXTHS[6], i=5, folder="f", **HF)
    code, out = imp(tmp_path, runs)
    assert code == 0
    g = grid(out).set_index("config_id")
    moderate = g.loc["xstest/T2/moderate/0shot/free_form"]
    assert (moderate["n_seeds"], moderate["score"]) == (2, (3 / 6 + 5 / 6) / 2)
    assert json.loads(moderate["seed_scores"]) == {"2": 0.5, "4": 5 / 6}
    assert g.loc["xstest/T2/t0.5-p1/0shot/free_form", "score"] == 1 / 6
    assert g.loc["xstest/T2/greedy+max_gen_toks=32/0shot/free_form", "score"] == 2 / 6
    sys_hash = hashlib.sha256(b"Be brief.").hexdigest()[:8]
    assert g.loc[f"xstest/T1+oneturn+sys={sys_hash}/greedy/3shot/logprob", "score"] == 4 / 6
    hf = g[g["model"] == "hf:/models/other"].iloc[0]
    assert (hf["precision"], hf["template"]) == ("bf16", "T1")
    items = pd.read_parquet(out / "items.parquet")
    assert sorted(items.loc[items["config_id"] == "xstest/T2/moderate/0shot/free_form", "seed"].unique()) == [2, 4]
    rules = (out / "rules.yaml").read_text()
    assert "t0.5-p1:" in rules and "temperature: 0.5" in rules


def test_a_mapping_file_places_other_tasks_and_unplaced_ones_are_listed(tmp_path, capsys):
    runs = tmp_path / "runs"
    for i, (variant, model, k) in enumerate([("v1", "m1", 3), ("v2", "m1", 5), ("v1", "m2", 4), ("v2", "m2", 2)]):
        write_run(
            runs,
            scores=SIXTHS[k],
            task=f"my_quiz_{variant}",
            model=model,
            weights=None,
            i=i,
            folder=f"{variant}{model}",
            ids=[f"q{j}" for j in range(6)],
        )
    write_run(runs, scores=SIXTHS[1], task="other_task", model="m1", weights=None, i=9, folder="x")
    mapping = tmp_path / "map.yaml"
    mapping.write_text(
        'tasks:\n  - match: "my_quiz_(v\\\\d)"\n    benchmark: quiz\n    template: "prompt-\\\\1"\n'
        'models:\n  - match: "m1"\n    label: model-one\n'
    )
    code, out = imp(tmp_path, runs, args=("--mapping", str(mapping)))
    assert code == 0
    err = capsys.readouterr().err
    assert "unmapped" in err and "other_task" in err
    g = grid(out)
    assert sorted(g["config_id"].unique()) == [
        "quiz/prompt-v1/greedy/0shot/logprob",
        "quiz/prompt-v2/greedy/0shot/logprob",
    ]
    assert sorted(g["model"].unique()) == ["m2", "model-one"]
    unmapped = pd.read_csv(out / "unmapped.csv")
    assert list(unmapped["task"]) == ["other_task"] and "mapping" in unmapped["reason"].iloc[0]
    assert "external_benchmarks:\n- quiz" in (out / "rules.yaml").read_text()
    items = pd.read_parquet(out / "items.parquet")
    assert set(items["item_id"]) == {f"q{j}" for j in range(6)}  # the documents' own ids
    prov = pd.read_csv(out / "provenance.csv")
    assert (
        prov.loc[prov["kind"] == "mapping file", "sha256"].iloc[0] == hashlib.sha256(mapping.read_bytes()).hexdigest()
    )
    assert (
        main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures", "--bootstrap", "20"])
        == 0
    )
    rho = pd.read_csv(tmp_path / "an" / "rho_flip.csv")
    full = rho[(rho["slice"] == "full") & (rho["benchmark"] == "quiz")].iloc[0]
    assert (full["model_a"], full["n_plus"], full["n_minus"], full["rho_flip"]) == ("m2", 1, 1, 0.5)  # 4>3, 2<5


def test_nothing_mapped_is_one_line_and_nothing_is_written(tmp_path, capsys):
    write_run(tmp_path / "runs", scores=SIXTHS[1], task="other_task")
    code, out = imp(tmp_path, tmp_path / "runs")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "other_task" in err and "results_" in err
    assert not out.exists()


def test_metric_is_the_primary_one_or_the_one_asked_for(tmp_path, capsys):
    extra = {"acc_norm,none": 0.25, "acc_norm_stderr,none": 0.1, "bleu,none": 23.5}
    write_run(tmp_path / "runs", scores=SIXTHS[3], task="quiz_a", extra_metrics=extra, weights=None)
    mapping = tmp_path / "m.yaml"
    mapping.write_text("tasks:\n  - {match: quiz_a, benchmark: quiz, template: a}\n")
    code, out = imp(tmp_path, tmp_path / "runs", args=("--mapping", str(mapping)))
    assert code == 0 and grid(out)[["score", "metric"]].iloc[0].tolist() == [0.5, "acc,none"]
    code, out = imp(tmp_path, tmp_path / "runs", out="norm", args=("--mapping", str(mapping), "--metric", "acc_norm"))
    g = grid(out).iloc[0]
    assert code == 0 and (g["score"], g["metric"]) == (0.25, "acc_norm,none")
    assert g["items"].startswith("no:")  # acc_norm has no per-sample value in these samples: no item rows
    capsys.readouterr()
    code, _ = imp(tmp_path, tmp_path / "runs", out="bleu", args=("--mapping", str(mapping), "--metric", "bleu"))
    assert code == 2 and "not a share in [0, 1]" in capsys.readouterr().err


def test_versions_item_sets_and_model_names_that_disagree_are_kept_apart(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, scores=SIXTHS[3], i=0, folder="a", lm_eval_version="0.4.12")
    write_run(runs, scores=SIXTHS[4], i=1, folder="b", shots=3)
    code, out = imp(tmp_path, runs)
    assert code == 0
    assert sorted(grid(out)["package"]) == ["lm-eval==0.4.12", "lm-eval==0.4.13"]
    assert "package version" in capsys.readouterr().err
    assert main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures"]) == 2
    assert "mixes (precision, package) groups" in capsys.readouterr().err

    runs2 = tmp_path / "runs2"
    write_run(runs2, scores=SIXTHS[3], i=0, folder="a")
    write_run(runs2, scores=SIXTHS[3], i=1, folder="b", shots=3)
    write_run(runs2, scores=[1.0, 0.0, 1.0, 0.0], i=2, folder="c", shots=5)  # --limit 4: another item set
    code, out = imp(tmp_path, runs2, out="o2")
    g = grid(out).set_index("shots")
    assert code == 0 and g.loc[0, "package"] == g.loc[3, "package"] == "lm-eval"
    assert g.loc[5, "package"].startswith("lm-eval [items n=4:")
    dis = pd.read_csv(out / "disagreements.csv")
    assert list(dis["kind"]) == ["different items"]

    runs3 = tmp_path / "runs3"
    write_run(runs3, scores=SIXTHS[3], i=0, folder="a", weights="a" * 64)
    write_run(runs3, scores=SIXTHS[2], i=1, folder="b", weights="b" * 64, shots=3)
    write_run(runs3, scores=SIXTHS[2], i=2, folder="c", model="smol-copy", weights="b" * 64, shots=3)
    code, out = imp(tmp_path, runs3, out="o3")
    assert code == 0
    assert sorted(grid(out)["model"]) == ["smol-copy", "smollm2#aaaaaaaa", "smollm2#bbbbbbbb"]
    dis = pd.read_csv(out / "disagreements.csv").set_index("kind")
    assert "smol-copy, smollm2#bbbbbbbb" in dis.loc["model names", "values"]


def test_duplicates_newest_keep_and_refuse(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, scores=SIXTHS[2], i=0, folder="old", date=1000.0)
    write_run(runs, scores=SIXTHS[5], i=1, folder="new", date=2000.0)
    write_run(runs, scores=SIXTHS[3], i=2, folder="other", shots=3)
    code, out = imp(tmp_path, runs)
    g = grid(out).set_index("shots")
    assert code == 0 and (g.loc[0, "score"], g.loc[0, "n_seeds"]) == (5 / 6, 1)
    dup = pd.read_csv(out / "duplicates.csv")
    assert sorted(dup["action"].str.split(" ").str[0]) == ["dropped", "kept"]
    assert (
        dup.loc[dup["action"].str.startswith("dropped"), "source"]
        .iloc[0]
        .endswith(str(Path("old") / "results_2026-01-01T12-00-00.000000.json"))
    )
    prov = pd.read_csv(out / "provenance.csv")
    assert "duplicate (dropped)" in set(prov["status"])
    code, out = imp(tmp_path, runs, out="keep", args=("--duplicates", "keep"))
    g = grid(out).set_index("shots")
    assert code == 0 and (g.loc[0, "score"], g.loc[0, "n_seeds"]) == ((2 / 6 + 5 / 6) / 2, 2)
    items = pd.read_parquet(out / "items.parquet")
    assert sorted(items.loc[items["config_id"].str.contains("/0shot/"), "seed"].unique()) == [0, 1]
    capsys.readouterr()
    code, out = imp(tmp_path, runs, out="refuse", args=("--duplicates", "refuse"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "old" in err and "new" in err and not out.exists()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


@pytest.mark.parametrize(
    "damage, expect",
    [
        ("truncated results", "is not valid JSON"),
        ("samples without results", "has no results file beside it"),
        ("old version", "lm-eval 0.3.0"),
        ("no configs", "no 'configs' section"),
        ("partial samples", "partial samples file"),
        ("damaged samples", "line 4 is not JSON"),
    ],
)
def test_bad_input_is_one_line_naming_the_file_and_skip_bad_imports_the_rest(tmp_path, capsys, damage, expect):
    runs = tmp_path / "runs"
    good = write_run(runs, scores=SIXTHS[3], i=0, folder="good")
    bad = write_run(runs, scores=SIXTHS[4], i=1, folder="bad", shots=3)
    samples = next(bad.parent.glob("samples_*.jsonl"))
    named = bad
    if damage == "truncated results":
        _truncate(bad)
    elif damage == "samples without results":
        bad.unlink()
        named = samples
    elif damage == "old version":
        bad.write_text(bad.read_text().replace('"lm_eval_version": "0.4.13"', '"lm_eval_version": "0.3.0"'))
    elif damage == "no configs":
        data = json.loads(bad.read_text())
        del data["configs"]
        bad.write_text(json.dumps(data))
    elif damage == "partial samples":
        samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:4]))
        named = samples
    elif damage == "damaged samples":
        lines = samples.read_text().splitlines(keepends=True)
        samples.write_text("".join(lines[:3]) + lines[3][:40] + "\n")
        named = samples
    code, out = imp(tmp_path, runs)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(named) in err and expect in err, err
    assert not out.exists()
    code, out = imp(tmp_path, runs, args=("--skip-bad",))
    err = capsys.readouterr().err
    assert code == 0 and f"bad input skipped: {named}" in err
    assert grid(out)["sources"].tolist() == [str(good)]
    assert pd.read_csv(out / "bad_inputs.csv")["path"].tolist() == [str(named)]


def test_a_results_file_that_logged_samples_for_some_tasks_only_is_partial(tmp_path, capsys):
    path = write_run(tmp_path / "runs", scores=SIXTHS[3])
    data = json.loads(path.read_text())
    data["configs"]["safetyrepro_xstest_t2"] = dict(
        data["configs"]["safetyrepro_xstest_t1"], task="safetyrepro_xstest_t2"
    )
    data["results"]["safetyrepro_xstest_t2"] = dict(data["results"]["safetyrepro_xstest_t1"])
    path.write_text(json.dumps(data))
    code, _ = imp(tmp_path, tmp_path / "runs")
    err = capsys.readouterr().err
    assert code == 2 and "a partial run folder" in err and "safetyrepro_xstest_t2" in err


def test_missing_path_and_empty_folder(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert imp(tmp_path, tmp_path / "nope")[0] == 2
    assert "does not exist" in capsys.readouterr().err
    assert imp(tmp_path, tmp_path / "empty")[0] == 2
    assert "holds no lm-eval results" in capsys.readouterr().err


def test_provenance_names_every_file_with_its_hash_and_the_cells_it_fed(tmp_path):
    two_models_four_configs(tmp_path / "runs")
    code, out = imp(tmp_path, tmp_path / "runs")
    prov = pd.read_csv(out / "provenance.csv")
    files = sorted(p for p in (tmp_path / "runs").rglob("*") if p.is_file())
    assert code == 0 and sorted(prov["path"]) == sorted(map(str, files)) and len(files) == 16
    for row in prov.itertuples():
        assert row.sha256 == hashlib.sha256(Path(row.path).read_bytes()).hexdigest()
        assert row.status == "imported" and len(row.cells.split(";")) == 1
    g = grid(out)
    assert set(prov["cells"]) == set(g["model"] + "|" + g["config_id"])


def test_a_second_import_replaces_the_first_byte_for_byte_and_a_sweep_folder_is_refused(tmp_path, capsys):
    two_models_four_configs(tmp_path / "runs")
    _, out = imp(tmp_path, tmp_path / "runs")
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert imp(tmp_path, tmp_path / "runs")[0] == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text("{}")
    assert imp(tmp_path, tmp_path / "runs", out="sweep")[0] == 2
    assert "holds a sweep" in capsys.readouterr().err
    hand = tmp_path / "hand"
    hand.mkdir()
    (hand / "grid.csv").write_text("model\n")
    assert imp(tmp_path, tmp_path / "runs", out="hand")[0] == 2
    assert (hand / "grid.csv").read_text() == "model\n"


def test_the_hf_backend_records_its_dtype_and_a_4bit_load_is_nf4(tmp_path):
    write_run(tmp_path / "runs", scores=SIXTHS[3], i=0, folder="a", **HF)
    write_run(
        tmp_path / "runs",
        scores=SIXTHS[3],
        i=1,
        folder="b",
        model_kind="hf",
        model="/models/q",
        model_args={"pretrained": "/models/q", "load_in_4bit": "True"},
        weights=None,
    )
    code, out = imp(tmp_path, tmp_path / "runs")
    g = grid(out).set_index("model")
    assert (
        code == 0 and g.loc["hf:/models/other", "precision"] == "bf16" and g.loc["hf:/models/q", "precision"] == "nf4"
    )
    run = json.loads((out / "run.json").read_text())
    assert {m["label"]: m["backend"]["kind"] for m in run["models"]} == {
        "hf:/models/other": "lm-eval:hf",
        "hf:/models/q": "lm-eval:hf",
    }


def test_smollm2_weights_hash_travels_to_run_json(tmp_path):
    write_run(tmp_path / "runs", scores=SIXTHS[3])
    _, out = imp(tmp_path, tmp_path / "runs")
    run = json.loads((out / "run.json").read_text())
    assert run["models"][0]["weights_sha256"] == SMOL_SHA and run["packages"] == {"lm-eval": "0.4.13"}


def test_a_file_named_alone_brings_the_files_of_its_run(tmp_path):
    results = write_run(tmp_path / "runs", scores=SIXTHS[3])
    write_run(tmp_path / "runs", scores=SIXTHS[5], i=1, shots=3)  # beside it, another run: not named, not read
    samples = next(results.parent.glob(f"samples_*{results.name.removeprefix('results_').removesuffix('.json')}.jsonl"))
    for named in (results, samples):
        code, out = imp(tmp_path, named, out=f"o-{named.suffix}")
        g = grid(out)
        assert code == 0 and g["score"].tolist() == [0.5] and g["items"].tolist() == ["yes"]
        assert sorted(pd.read_csv(out / "provenance.csv")["path"]) == sorted([str(results), str(samples)])


def test_runs_without_samples_give_a_grid_without_item_records(tmp_path, capsys):
    with_samples, without = tmp_path / "with", tmp_path / "without"
    for root, samples in ((with_samples, True), (without, False)):
        for i, (model, shots, k) in enumerate([("a", 0, 3), ("a", 3, 4), ("b", 0, 4), ("b", 3, 2)]):
            write_run(
                root,
                scores=SIXTHS[k],
                model=model,
                shots=shots,
                weights=None,
                i=i,
                folder=f"{model}{shots}",
                samples=samples,
            )
    code, out = imp(tmp_path, with_samples)
    assert code == 0 and len(pd.read_parquet(out / "items.parquet")) == 24
    code, out = imp(tmp_path, without)  # into the same folder: the earlier import's records must not stay beside it
    assert code == 0 and not (out / "items.parquet").exists()
    assert set(grid(out)["items"]) == {"no: the run logged no samples (--log_samples)"}
    assert (
        main(["analyze", str(out / "grid.csv"), "--out", str(tmp_path / "an"), "--no-figures", "--bootstrap", "20"])
        == 0
    )
    rho = pd.read_csv(tmp_path / "an" / "rho_flip.csv")
    assert rho.loc[rho["slice"] == "full", "rho_flip"].tolist() == [0.5]  # a: 3<4, 4>2
    assert not (tmp_path / "an" / "significant_flips.csv").exists()


def test_a_safetyrepro_free_form_run_brings_the_prediction_its_task_logged(tmp_path, capsys):
    """The task scores each item once and logs the predicted label as the per-sample `top_answer_share`; the
    import takes it (the constant-answer screen reads it), a run from before the field has none, and a value
    that is no label index is one line naming the field, with nothing written."""
    from lm_eval_fixtures import sample_lines

    gen = dict(task="safetyrepro_xstest_t2_gen", output_type="generate_until")
    lines = sample_lines(SIXTHS[4], output_type="generate_until")
    for k, line in enumerate(lines):
        line["top_answer_share"] = [1, 1, 0, 1, None, 1][k]
    write_run(tmp_path / "runs", scores=SIXTHS[4], folder="new", lines=lines, **gen)
    write_run(tmp_path / "old", scores=SIXTHS[4], folder="old", **gen)
    code, out = imp(tmp_path, tmp_path / "runs")
    assert code == 0
    items = pd.read_parquet(out / "items.parquet").sort_values("item_id")
    got = dict(zip(items["item_id"], items["prediction"].astype("Int64").tolist(), strict=True))
    assert got == {i: p for i, p in zip(XSTEST_IDS[:6], [1, 1, 0, 1, pd.NA, 1], strict=True)}
    code, old = imp(tmp_path, tmp_path / "old", out="old-out")
    assert code == 0 and pd.read_parquet(old / "items.parquet")["prediction"].isna().all()
    lines[2]["top_answer_share"] = -1
    write_run(tmp_path / "bad", scores=SIXTHS[4], folder="bad", lines=lines, **gen)
    capsys.readouterr()
    code, bad = imp(tmp_path, tmp_path / "bad", out="bad-out")
    err = capsys.readouterr().err
    assert code != 0 and "top_answer_share" in err and len(err.strip().splitlines()) == 1 and not bad.exists()


def test_any_generated_task_that_logs_a_parse_rate_gets_the_readable_format_split(tmp_path, capsys):
    """A task SafetyRepro does not define that logs a parse_rate (per sample and as its mean) brings it: the cell's
    parse rate and each item's read flag, which the degenerate screen and the content reading use; `verdict` then
    says the lead rests on answer format. A task that logs none is read as before (every reply read)."""
    from lm_eval_fixtures import sample_lines

    read = {"m1": [1, 1, 0, 1, 0, 1], "m2": [1, 1, 1, 1, 1, 1]}
    for i, model in enumerate(read):
        scores = SIXTHS[4] if model == "m1" else SIXTHS[1]
        lines = sample_lines(scores, ids=[f"q{j}" for j in range(6)], output_type="generate_until")
        for line, flag in zip(lines, read[model], strict=True):
            line["parse_rate"] = float(flag)
        kwargs = dict(task="my_gen_quiz", output_type="generate_until", model=model, weights=None)
        path = write_run(tmp_path / "runs", scores=scores, i=i, folder=model, lines=lines, **kwargs)
        data = json.loads(path.read_text())
        data["results"]["my_gen_quiz"]["parse_rate,none"] = sum(read[model]) / 6
        path.write_text(json.dumps(data))
    mapping = tmp_path / "map.yaml"
    mapping.write_text('tasks:\n  - match: "my_gen_quiz"\n    benchmark: quiz\n    template: own\n')
    code, out = imp(tmp_path, tmp_path / "runs", args=("--mapping", str(mapping)))
    assert code == 0
    g = grid(out).set_index("model")
    assert g.loc["m1", "parse_rate"] == 4 / 6 and g.loc["m2", "parse_rate"] == 1.0
    items = pd.read_parquet(out / "items.parquet").sort_values(["model", "item_id"])
    assert items.loc[items["model"] == "m1", "parsed"].tolist() == [True, True, False, True, False, True]
    capsys.readouterr()
    assert main(["verdict", "m1", "m2", "--grid", str(out / "grid.csv")]) == 0
    assert "m1's one lead is format-driven (m1's parse rate 0.67)" in capsys.readouterr().out
