"""The failure catalogue on small hostile inputs (issue 31): every case is refused as one line on
stderr with exit code 2, naming the file, the field and what was expected (or the cap of
safetyrepro/limits.py); nothing reaches "internal error". The bombs (YAML aliases, an .eval archive
member of 1 GiB) are refused within seconds and well under 1 GB of memory; Markdown outputs escape
the labels they quote. Every input is built under tmp_path."""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import subprocess
import sys
import warnings
import zipfile
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "importers"))  # the importers' fixtures, shared, not copied
from lm_eval_fixtures import write_run  # noqa: E402
from refusals import refused as _refused
from test_import_lm_eval import two_models_four_configs  # noqa: E402

from safetyrepro import limits  # noqa: E402
from safetyrepro.cli import main  # noqa: E402

TASK = "safetyrepro_xstest_t1"
GiB = 1 << 30


def _measured(argv: list[str], timeout: int = 120) -> tuple[int, str, float, int]:
    """Run `python -m safetyrepro.cli ARGV` in a fresh process: (exit code, stderr, wall seconds, peak
    resident bytes of that process alone, read by a wrapper that has no other child)."""
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run([sys.executable, '-m', 'safetyrepro.cli', *sys.argv[1:]], capture_output=True, "
        "text=True)\n"
        "print(json.dumps([r.returncode, r.stderr, time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", wrapper, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )
    assert res.returncode == 0, res.stderr
    code, err, wall, rss = json.loads(res.stdout)
    return code, err, wall, rss


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "internal error" not in err and "Traceback" not in err, err
    return lines[0]


# -- lm-eval folders and Inspect logs to spoil ------------------------------------------------------
def _run(tmp_path: Path, **kwargs) -> Path:
    """One honest lm-eval run folder (6 xstest items, samples logged); returns its results file."""
    return write_run(tmp_path / "runs", scores=[1.0, 0.0, 1.0, 1.0, 0.0, 1.0], **kwargs)


def _rewrite(results: Path, change) -> Path:
    data = json.loads(results.read_text())
    change(data)
    results.write_text(json.dumps(data))  # NaN and Infinity are written as JSON's extension spells them
    return results


def _samples(results: Path) -> Path:
    return next(results.parent.glob("samples_*.jsonl"))


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _import_lm_eval(tmp_path: Path, *paths, args: tuple = ()) -> list[str]:
    return ["import", "lm-eval", *map(str, paths or (tmp_path / "runs",)), "--out", str(tmp_path / "out"), *args]


@pytest.fixture(scope="module")
def honest_eval(tmp_path_factory) -> Path:
    """One Inspect log written by Inspect itself (safetyrepro/xstest, 3 items, the mock model)."""
    from inspect_ai import eval as inspect_eval
    from test_import_inspect import REFUSE, _model

    from safetyrepro.tasks.inspect_task_registry import TASKS

    root = tmp_path_factory.mktemp("honest-eval")
    log = inspect_eval(
        TASKS["xstest"](template="T1"),
        model=_model("mockllm/alpha", REFUSE),
        limit=3,
        log_dir=str(root),
        display="none",
    )[0]
    assert log.status == "success"
    return next(root.glob("*.eval"))


def _members(path: Path) -> list[tuple[str, bytes]]:
    from safetyrepro.importers.archive import iter_members

    return list(iter_members(path.read_bytes()))


def _archive(dst: Path, members: list[tuple[str, bytes]]) -> Path:
    with warnings.catch_warnings(), zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name, and writes it
        for name, data in members:
            z.writestr(name, data)
    return dst


# == unbounded resources ==============================================================================
def test_billion_laughs_models_file_is_refused_in_seconds_and_little_memory(tmp_path):
    lines = ["a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    bomb = tmp_path / "models.yaml"
    bomb.write_text("\n".join(lines) + "\nmodels:\n  - spec: *a9\n")
    code, err, wall, rss = _measured(
        ["sweep", "--models-file", bomb, "--out", tmp_path / "o", "--benchmarks", "xstest", "--no-progress"]
    )
    line = _one_line(err)
    assert code == 2 and str(bomb) in line and "alias" in line and "anchor" in line, line
    assert wall < 10 and rss < GiB // 2, (wall, rss)
    assert not (tmp_path / "o").exists()


def test_yaml_anchors_in_a_mapping_file_are_refused(tmp_path, capsys):
    _run(tmp_path)
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("base: &b {benchmark: xstest, template: T1}\ntasks:\n  - {match: x, <<: *b}\n")
    _refused(_import_lm_eval(tmp_path, args=("--mapping", mapping)), capsys, str(mapping), "anchor (&b, line 1)")


@pytest.mark.parametrize("honest_size", [True, False], ids=["declared", "declared-size-lies"])
def test_eval_archive_bomb_is_refused_in_seconds_and_little_memory(tmp_path, monkeypatch, honest_eval, honest_size):
    """A 1 MB .eval holding a member that inflates to 1 GiB: refused from its declared size, or, when
    the central directory lies about the size, after MAX_MEMBER_BYTES of output."""
    bomb = _archive(tmp_path / "bomb.eval", _members(honest_eval))
    zeros = b"0" * (1 << 20)

    class Zeros:  # deflate of `zeros` ending in a full flush: the same 1 KB for every MiB (no 1 GiB to compress)
        def __init__(self, *args, **kwargs):
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            self.block, self.end = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH), c.flush()

        def compress(self, data: bytes) -> bytes:
            assert data == zeros
            return self.block

        def flush(self) -> bytes:
            return self.end

    monkeypatch.setattr(zipfile, "_get_compressor", Zeros)
    with zipfile.ZipFile(bomb, "a", zipfile.ZIP_DEFLATED) as z, z.open("samples/bomb_epoch_1.json", "w") as f:
        for _ in range(1024):
            f.write(zeros)
    monkeypatch.undo()
    assert bomb.stat().st_size < 2 << 20
    if not honest_size:  # rewrite the declared size (local header and central directory) to 1000 bytes
        data = bytearray(bomb.read_bytes())
        for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
            i = data.rfind(sig)
            data[i + at : i + at + 4] = (1000).to_bytes(4, "little")
        bomb.write_bytes(bytes(data))
    code, err, wall, rss = _measured(["import", "inspect", bomb, "--out", tmp_path / "out"])
    line = _one_line(err)
    assert code == 2 and str(bomb) in line and "samples/bomb_epoch_1.json" in line and "MAX_MEMBER_BYTES" in line
    assert wall < 10 and rss < 800 << 20, (wall, rss)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["recorded", "mapping", "models-file"])
def test_a_5000_character_label_is_refused(tmp_path, capsys, where):
    long = "m" * 5000
    if where == "models-file":
        f = tmp_path / "models.yaml"
        f.write_text(f"models:\n  - spec: smollm2\n    label: {long}\n")
        line = _refused(
            ["sweep", "--models-file", f, "--out", tmp_path / "o", "--benchmarks", "xstest"],
            capsys,
            str(f),
            "model 1",
            "MAX_LABEL_CHARS",
        )
    elif where == "recorded":
        results = _run(tmp_path, model=long, folder="m")
        line = _refused(_import_lm_eval(tmp_path), capsys, str(results), "MAX_LABEL_CHARS")
    else:
        _run(tmp_path)
        mapping = tmp_path / "mapping.yaml"
        mapping.write_text(f"models:\n  - match: smollm2\n    label: {long}\n")
        line = _refused(
            _import_lm_eval(tmp_path, args=("--mapping", mapping)),
            capsys,
            str(mapping),
            "models entry 1",
            "MAX_LABEL_CHARS",
        )
    assert len(line) < 600  # the label is quoted cut to 200 characters


# == malformed fields: one line, never "internal error" ===============================================
RESULTS_CASES = {
    "n-shot-nan": (lambda d: d["n-shot"].update({TASK: float("nan")}), ["'n-shot' of task", "nan", "whole number"]),
    "n-shot-infinity": (lambda d: d["n-shot"].update({TASK: float("inf")}), ["'n-shot'", "inf", "whole number"]),
    "n-shot-text": (lambda d: d["n-shot"].update({TASK: "three"}), ["'n-shot'", "'three'", "whole number"]),
    "n-shot-list": (lambda d: d["n-shot"].update({TASK: [3]}), ["'n-shot'", "[3]", "whole number"]),
    "n-samples-text": (lambda d: d["n-samples"].update({TASK: "many"}), ["'n-samples' of task", "expected an object"]),
    "n-samples-section-text": (lambda d: d.update({"n-samples": "many"}), ["'n-samples'", "expected an object"]),
    "gen-kwargs-list": (
        lambda d: d["config"].update({"gen_kwargs": ["temperature", 1]}),
        ["config.gen_kwargs", "expected an object"],
    ),
    "lone-surrogate-label": (
        lambda d: d["config"]["safetyrepro_model"].update({"label": "smol\ud800"}),
        ["lone surrogate"],
    ),
    "weights-not-text": (
        lambda d: d["config"]["safetyrepro_model"].update({"weights_sha256": [1, 2]}),
        ["config.model_sha", "expected a string"],
    ),
    "system-instruction-object": (
        lambda d: d.update({"system_instruction": {"a": 1}}),
        ["system_instruction", "expected a string"],
    ),
    "seed-text": (lambda d: d["config"]["gen_kwargs"].update({"seed": "x"}), ["seed", "'x'", "whole number"]),
    "seed-negative": (lambda d: d["config"]["gen_kwargs"].update({"seed": -3}), ["seed", "-3", "whole number"]),
}
SAMPLED = dict(task=TASK + "_gen", output_type="generate_until", gen_kwargs={"temperature": 0.7, "do_sample": True})


@pytest.mark.parametrize("case", sorted(RESULTS_CASES))
def test_a_malformed_results_field_is_one_line_naming_file_and_field(tmp_path, capsys, case):
    change, expect = RESULTS_CASES[case]
    results = _rewrite(_run(tmp_path, **(SAMPLED if case.startswith("seed") else {})), change)
    _refused(_import_lm_eval(tmp_path), capsys, str(results), *expect)
    assert not (tmp_path / "out").exists()


def test_json_nested_200000_deep_is_refused(tmp_path, capsys, honest_eval):
    results = _run(tmp_path)
    text = results.read_text()
    results.write_text(text[: text.rindex("}")] + ', "deep": ' + _deep(200_000) + "}")
    _refused(_import_lm_eval(tmp_path), capsys, str(results), "MAX_JSON_DEPTH")
    results = _run(tmp_path / "s")
    samples = _samples(results)
    samples.write_text('{"doc_id": 0, "doc": ' + _deep(200_000) + "}\n" + samples.read_text())
    _refused(_import_lm_eval(tmp_path / "s"), capsys, str(samples), "MAX_JSON_DEPTH")
    header = '{"version": 2, "eval": ' + _deep(200_000) + "}"
    log = _archive(
        tmp_path / "deep.eval", [(n, header.encode() if n == "header.json" else d) for n, d in _members(honest_eval)]
    )
    _refused(["import", "inspect", log, "--out", tmp_path / "o"], capsys, str(log), "header.json", "MAX_JSON_DEPTH")
    json_log = tmp_path / "deep.json"  # an Inspect log written as one JSON file
    json_log.write_text(header)
    _refused(["import", "inspect", json_log, "--out", tmp_path / "o"], capsys, str(json_log), "MAX_JSON_DEPTH")


@pytest.mark.parametrize("target", ["9" * 5000, 10**30], ids=["5000-digit-text", "ten-to-the-30"])
def test_a_huge_target_is_refused(tmp_path, capsys, target):
    results = _run(tmp_path)
    samples = _samples(results)
    lines = [json.loads(x) for x in samples.read_text().splitlines()]
    lines[2]["target"] = target
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    _refused(_import_lm_eval(tmp_path), capsys, str(samples), "target", "doc_id 2", "0 to 2147483647")


def test_a_5000_digit_number_in_json_is_refused(tmp_path, capsys):
    results = _run(tmp_path)
    samples = _samples(results)
    samples.write_text(samples.read_text().replace('"target": "1"', '"target": ' + "7" * 5000, 1))
    _refused(_import_lm_eval(tmp_path), capsys, str(samples), "5000 digits", "MAX_NUMBER_DIGITS")


@pytest.mark.parametrize(
    "content,expect",
    [
        (b"models:\n  - spec: smol\xff\xfe\n", "is not UTF-8 text"),
        (b"models: " + _deep(5000).encode() + b"\n", "MAX_JSON_DEPTH"),
    ],
    ids=["not-utf8", "nested-5000"],
)
def test_a_models_file_not_utf8_or_nested_5000_deep_is_refused(tmp_path, capsys, content, expect):
    f = tmp_path / "models.yaml"
    f.write_bytes(content)
    _refused(["sweep", "--models-file", f, "--out", tmp_path / "o", "--benchmarks", "xstest"], capsys, str(f), expect)


@pytest.fixture(scope="module")
def imported_grid(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("grid")
    two_models_four_configs(root / "runs")
    assert main(["import", "lm-eval", str(root / "runs"), "--out", str(root / "out")]) == 0
    return root / "out" / "grid.csv"


def _analyze(grid: Path, out: Path) -> list:
    return ["analyze", grid, "--out", out, "--no-figures", "--rules", grid.parent / "rules.yaml"]


@pytest.mark.parametrize(
    "flag,value,expect", [("--seed", "-1", "0 to 2147483647"), ("--bootstrap", "1000000000000", "MAX_BOOTSTRAP")]
)
def test_analyze_seed_and_bootstrap_outside_their_range(tmp_path, capsys, imported_grid, flag, value, expect):
    _refused([*_analyze(imported_grid, tmp_path / "a"), flag, value], capsys, f"{flag} {value}", expect)
    assert not (tmp_path / "a" / "report.md").exists()


# == silent acceptance ================================================================================
def test_negative_shots_are_refused_not_imported(tmp_path, capsys):
    results = _rewrite(
        _run(tmp_path), lambda d: (d["n-shot"].update({TASK: -7}), d["configs"][TASK].update({"num_fewshot": -7}))
    )
    _refused(_import_lm_eval(tmp_path), capsys, str(results), "'n-shot'", "-7", "from 0 to 1000")
    assert not (tmp_path / "out").exists()


def test_a_duplicate_header_member_is_refused_not_the_last_copy_taken(tmp_path, capsys, honest_eval):
    members = _members(honest_eval)
    header = json.loads(dict(members)["header.json"])
    header["results"]["scores"][0]["metrics"]["accuracy"]["value"] = 0.999
    forged = _archive(tmp_path / "forged.eval", [*members, ("header.json", json.dumps(header).encode())])
    _refused(
        ["import", "inspect", forged, "--out", tmp_path / "out"], capsys, str(forged), "two members named 'header.json'"
    )
    assert not (tmp_path / "out").exists()


def test_item_ids_that_are_not_utf8_are_refused_not_replaced(tmp_path, capsys):
    samples = _samples(_run(tmp_path))
    samples.write_bytes(samples.read_bytes().replace(b"xstest/429", b"xstest/42\xff"))  # not a UTF-8 byte
    _refused(_import_lm_eval(tmp_path), capsys, str(samples), "not UTF-8", "0xff")
    assert not (tmp_path / "out").exists()


def test_labels_are_escaped_in_report_md_and_grid_card_md(tmp_path, capsys):
    two_models_four_configs(tmp_path / "runs")
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        'models:\n  - match: smollm2\n    label: "<script>alert(1)</script>"\n'
        '  - match: "hf:/models/other"\n    label: "[l](javascript:alert(1))"\n'
    )
    assert (
        main(["import", "lm-eval", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--mapping", str(mapping)])
        == 0
    )
    assert (
        main(
            [
                "analyze",
                str(tmp_path / "out" / "grid.csv"),
                "--out",
                str(tmp_path / "a"),
                "--no-figures",
                "--bootstrap",
                "20",
            ]
        )
        == 0
    )
    for name in ("report.md", "grid_card.md"):
        text = (tmp_path / "a" / name).read_text()
        assert "alert(1)" in text, name  # the labels are there, as text, escaped where Markdown would act
        assert not re.search(r"(?<!\\)<script", text) and not re.search(r"(?<!\\)\]\(javascript:", text), name
        assert "\\<script>" in text and "\\[l\\](javascript:" in text, name
    assert "&lt;script&gt;" in (tmp_path / "a" / "report.html").read_text()
    assert "xstest/T1/greedy/0shot/logprob" in (tmp_path / "a" / "grid_card.md").read_text()  # plain ids stay plain


def test_markdown_helpers_keep_ordinary_labels_readable():
    from safetyrepro.markdown import md_code, md_escape, md_prose

    for plain in ("qwen2.5-coder-0.5b", "free_form", "xstest/T1/greedy/0shot/free_form", "parse_rate 0.00 < 0.95"):
        assert md_escape(plain) == plain
    assert md_escape("<b>x|y</b>") == "\\<b>x\\|y\\</b>" and md_escape("_x*") == "\\_x\\*"
    assert (
        md_prose("model `a<b` and <img src=x> [l](javascript:x)")
        == "model `a<b` and \\<img src=x> \\[l\\](javascript:x)"
    )
    assert md_prose("| a `x | <b> | y` |") == "| a `x | \\<b> | y` |"  # a table cell ends a code span
    assert md_code("a``b") == "```a``b```"


# == misleading messages ==============================================================================
@pytest.mark.parametrize("command", ["import", "analyze"])
def test_a_full_disk_names_the_file_and_does_not_promise_finished_work(
    tmp_path, capsys, monkeypatch, imported_grid, command
):
    from safetyrepro.cli import os_error_message

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    if command == "import":
        _run(tmp_path)
        argv, out = _import_lm_eval(tmp_path), tmp_path / "out"
    else:
        argv, out = [*_analyze(imported_grid, tmp_path / "a"), "--bootstrap", "20"], tmp_path / "a"
    monkeypatch.setattr(os, "fsync", full)
    line = _refused(argv, capsys, "No space left on device", str(out / ""), "rerun")
    assert "finished work is kept" not in line
    # an error that escapes to the command line: the hint is the command's own
    hint = os_error_message(OSError(errno.ENOSPC, "No space left on device", "/x/f"), command)
    assert "/x/f" in hint and "rerun the same command" in hint and "finished work is kept" not in hint
    assert ("nothing was imported" if command == "import" else "the analysis did not finish") in hint
    assert "finished work is kept" in os_error_message(OSError(errno.ENOSPC, "No space", "/x"), "sweep")


def test_an_outputs_cache_on_a_full_file_system_is_not_called_damaged(tmp_path, monkeypatch):
    import shutil

    from safetyrepro.sweep import outputs_cache

    cache = outputs_cache.OutputsCache(tmp_path / "outputs.sqlite")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 0))
    for text in ("disk I/O error", "unable to open database file"):
        message = str(cache._error(sqlite3.OperationalError(text)))
        assert "free disk space" in message and "not damaged" in message and "mv " not in message, message


def test_a_20_mb_spec_is_not_echoed_whole(tmp_path, capsys):
    f = tmp_path / "models.yaml"
    f.write_text("models:\n  - spec: " + "x" * 20_000_000 + "\n")
    line = _refused(
        ["sweep", "--models-file", f, "--out", tmp_path / "o", "--benchmarks", "xstest"],
        capsys,
        str(f),
        "MAX_CONFIG_BYTES",
    )
    assert len(line) < 500
    f.write_text("models:\n  - spec: " + "x" * 500_000 + "\n")
    line = _refused(
        ["sweep", "--models-file", f, "--out", tmp_path / "o", "--benchmarks", "xstest"],
        capsys,
        str(f),
        "MAX_SPEC_CHARS",
        "(500000 characters)",
    )
    assert len(line) < 600
    line = _refused(["sweep", "--models", "y" * 100_000, "--out", tmp_path / "o", "--benchmarks", "xstest"], capsys)
    assert len(line) < limits.MESSAGE_CHARS + 100  # any message is cut to one readable line


def test_a_folder_holding_only_a_linked_run_folder_says_the_link_was_skipped(tmp_path, capsys):
    results = _run(tmp_path / "real")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "run").symlink_to(results.parent, target_is_directory=True)
    _refused(
        _import_lm_eval(tmp_path, logs),
        capsys,
        str(logs),
        "holds no lm-eval results",
        "1 linked folder(s) under it were not followed",
        str(logs / "run"),
    )


def test_the_caps_are_documented():
    text = (Path(__file__).resolve().parent.parent / "docs" / "formats.md").read_text()
    section = text[text.index("## Limits on untrusted input") :]
    for name in (
        "MAX_FILE_BYTES",
        "MAX_CONFIG_BYTES",
        "MAX_MEMBER_BYTES",
        "MAX_ARCHIVE_BYTES",
        "MAX_MEMBERS",
        "MAX_JSON_DEPTH",
        "MAX_NUMBER_DIGITS",
        "MAX_LABEL_CHARS",
        "MAX_SPEC_CHARS",
        "MAX_SHOTS",
        "MAX_SEED",
        "MAX_COUNT",
        "MAX_CHOICE",
        "MAX_ANALYSIS_SEED",
        "MAX_BOOTSTRAP",
    ):
        assert name in section, name
        value = getattr(limits, name)
        assert f"{value:,}".replace(",", " ") in section or str(value) in section, (name, value)


def test_a_5000_character_label_in_a_hand_written_grid_is_refused_at_once(tmp_path, capsys):
    """analyze on a grid whose model label is 5,000 characters: refused while validating (it took 101 s
    and 5.5 GB for a 7 MB PNG), naming the cap."""
    sys.path.insert(0, str(Path(__file__).parent / "analysis"))
    from analysis_grids import CC, grid_frame

    frame = grid_frame({"a" * 5000: dict.fromkeys(CC, 0.5), "b": dict.fromkeys(CC, 0.6)})
    frame.to_csv(tmp_path / "grid.csv", index=False)
    err = _refused(
        ["analyze", str(tmp_path / "grid.csv"), "--out", str(tmp_path / "out")],
        capsys,
        "MAX_SPEC_CHARS",
        "5000 characters",
    )
    assert not (tmp_path / "out").exists() and len(err) < 600
