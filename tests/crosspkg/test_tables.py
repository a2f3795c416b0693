"""Table 7 arithmetic and Table 8's dependence on what the packages actually ran."""

from __future__ import annotations

import pytest
from conftest import chat, clone

from safetyrepro.crosspkg import tables


def cell(rows, axis, stack, bench="truthfulqa"):
    return next(r for r in rows if r["benchmark"] == bench and r["axis"] == axis)[stack]


def test_table7_scores_range_and_overlap(native):
    (row,) = tables.table7(native, ["truthfulqa"])
    assert row["lm-eval"] == pytest.approx(2 / 3)
    assert row["helm"] == pytest.approx(1 / 3)
    assert row["inspect"] == pytest.approx(2 / 3)
    assert row["range"] == pytest.approx(1 / 3)
    assert row["overlap lm-eval∩helm"] == 2 and row["overlap lm-eval∩inspect"] == 1
    assert row["overlap helm∩inspect"] == 2 and row["overlap all"] == 1
    assert row["inspect-greedy"] is None


def test_table7_range_needs_two_packages(native):
    only = {"lm-eval": native["lm-eval"]}
    (row,) = tables.table7(only, ["truthfulqa"])
    assert row["range"] is None and row["packages"] == 1


def test_table8_reads_the_stacks(native, tokenizer):
    rows = tables.table8(native, ["truthfulqa"], tokenizer)
    assert {r["axis"] for r in rows} == set(tables.AXES)
    assert cell(rows, "chat template", "lm-eval").startswith("off")
    assert cell(rows, "chat template", "helm").startswith("on")
    assert "SmolLM" in cell(rows, "system prompt", "inspect")
    assert cell(rows, "system prompt", "lm-eval").startswith("none")
    assert "multiple_choice_joint" in cell(rows, "candidate object", "helm")
    assert "1e-07" in cell(rows, "decoding as executed", "helm")
    assert next(r for r in rows if r["axis"] == "chat template")["differs"] == "△"


@pytest.mark.parametrize(
    "change, axis, stack",
    [
        (
            lambda n: n["helm"]["meta"]["specs"]["truthfulqa"]["adapter_spec"].update(max_train_instances=5),
            "few-shot",
            "helm",
        ),
        (
            lambda n: n["helm"]["meta"]["specs"]["truthfulqa"]["adapter_spec"].update(
                output_mapping_pattern=r"([A-Z])"
            ),
            "answer extraction",
            "helm",
        ),
        (
            lambda n: n["inspect"]["meta"]["meta"]["truthfulqa"]["model_args"].update(do_sample=False),
            "decoding as executed",
            "inspect",
        ),
        (
            lambda n: n["inspect"]["meta"]["meta"]["truthfulqa"]["model_generate_config"].update(max_tokens=1),
            "decoding as executed",
            "inspect",
        ),
        (lambda n: n["lm-eval"]["meta"]["results"]["n-shot"].update(truthfulqa_mc1=5), "few-shot", "lm-eval"),
        (
            lambda n: n["lm-eval"]["meta"]["invocation"].update(system_instruction="Be careful."),
            "system prompt",
            "lm-eval",
        ),
    ],
)
def test_table8_changes_with_a_package_setting(native, tokenizer, change, axis, stack):
    before = cell(tables.table8(native, ["truthfulqa"], tokenizer), axis, stack)
    changed = clone(native)
    change(changed)
    after = cell(tables.table8(changed, ["truthfulqa"], tokenizer), axis, stack)
    assert before != after


def test_table8_chat_cell_follows_the_prompt_sent(native, tokenizer):
    changed = clone(native)
    for r in changed["lm-eval"]["records"]["truthfulqa"]:
        r.prompt = chat(r.prompt)  # as if lm-eval had run with --apply_chat_template
    rows = tables.table8(changed, ["truthfulqa"], tokenizer)
    assert cell(rows, "chat template", "lm-eval").startswith("on")
    assert "SmolLM" in cell(rows, "system prompt", "lm-eval")


def test_markdown_and_files(native, tokenizer, tmp_path):
    t7 = tables.table7(native, ["truthfulqa"])
    t8 = tables.table8(native, ["truthfulqa"], tokenizer)
    tables.write_tables(tmp_path, t7, t8)
    md = (tmp_path / "table7.md").read_text()
    assert "| truthfulqa | 66.7 | 33.3 | 66.7 |" in md
    assert (tmp_path / "table8.csv").read_text().count("\n") == len(tables.AXES) + 1
