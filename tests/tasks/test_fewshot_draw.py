"""Issue 53: an option draws each item's own few-shot examples, so that the draw is part of what a claim about
the items generalises over. One draw rule (subsets.draw_demos) feeds lm-eval, Inspect and the sweep; both
models of a comparison see the same examples on an item, so the comparison stays paired."""

from __future__ import annotations

import argparse
import json

import pytest

from safetyrepro.certify.cli import options_from
from safetyrepro.certify.outputs import PER_ITEM_WORDS, TARGET_WORDS, target_words
from safetyrepro.cli import build_parser, with_current_spelling
from safetyrepro.errors import UserError
from safetyrepro.lm_eval_plugin import task_dir
from safetyrepro.sweep.plan import SweepSpec
from safetyrepro.sweep.store import identity_changes
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.inspect_tasks import benchmark_task, samples
from safetyrepro.tasks.lm_eval_tasks import task_name
from safetyrepro.tasks.subsets import draw_demos, item_set


def test_each_item_draws_its_own_examples_from_the_pool_and_the_fixed_draw_is_unchanged(data_dir):
    s = item_set("xstest")
    first, second = s.items[0].id, s.items[1].id
    assert s.demos_for(3) == s.demos[3] == draw_demos(s.pool, "xstest", s.seed, 3)  # the paper's one draw
    assert s.demos_for(3, first) == s.demos[3]  # an item's id does not change the fixed draw
    mine = s.demos_for(3, first, "per_item")
    assert mine == s.demos_for(3, first, "per_item") and len(mine) == 3  # the same on every call, every model
    assert mine != s.demos_for(3, second, "per_item") and mine != s.demos[3]
    assert s.demos_for(0, first, "per_item") == ()
    scored = {it.id for it in s.items}
    drawn = {d.id for it in s.items for d in s.demos_for(5, it.id, "per_item")}
    assert not drawn & scored and drawn <= {it.id for it in s.pool}
    assert len(drawn) > 100  # 450 items x 5 examples spread over the pool, not a handful
    with pytest.raises(UserError, match="few-shot draw 'each'"):
        s.demos_for(3, first, "each")
    with pytest.raises(ValueError, match="needs the item's id"):
        s.demos_for(3, None, "per_item")


def test_inspect_and_lm_eval_build_each_items_prompt_with_its_own_examples(data_dir):
    """The same messages from both packages, item by item, with --metadata / -T fewshot_draw=per_item."""
    from lm_eval.tasks import TaskManager

    bench, s = get_benchmark("bbq"), item_set("bbq")
    inspect_samples = samples("bbq", "T2", 3, "per_item")
    manager = TaskManager(include_path=str(task_dir()), include_defaults=False, metadata={"fewshot_draw": "per_item"})
    name = task_name("bbq", "T2", "free_form")
    task = manager.load([name])["tasks"][name] if hasattr(manager, "load") else None
    if task is None:  # lm-eval < 0.4.12
        from lm_eval.tasks import get_task_dict

        task = get_task_dict([name], manager)[name]
    docs = list(task.eval_docs)[:4]
    seen = set()
    for doc, item, sample in zip(docs, s.items, inspect_samples, strict=False):
        assert doc["id"] == item.id == sample.id and doc["fewshot_draw"] == "per_item"
        ours = bench.prompt(item, "T2", s.demos_for(3, item.id, "per_item")).messages()
        chat = task.fewshot_context(
            doc,
            3,
            apply_chat_template=True,
            fewshot_as_multiturn=True,
            chat_template=lambda msgs, add_generation_prompt=True: json.dumps(msgs),
        )
        assert json.loads(chat) == ours
        assert [{"role": m.role, "content": m.text} for m in sample.input] == ours
        seen.add(json.dumps(ours[:-1]))  # the examples (and the system message) before the item
    assert len(seen) == 4  # four items, four draws of examples


def test_a_default_runs_documents_are_as_before_so_verdict_pairs_them_with_earlier_runs(data_dir):
    from safetyrepro.tasks.lm_eval_task_functions import dataset

    (default,) = dataset("xstest", "T1")["test"].select([0])
    assert sorted(default) == ["benchmark", "id", "system", "template", "tie_rule"]  # lm-eval's doc_hash input
    (drawn,) = dataset("xstest", "T1", fewshot_draw="per_item")["test"].select([0])
    assert drawn == {**default, "fewshot_draw": "per_item"}


def test_the_inspect_task_takes_the_draw_and_refuses_a_wrong_one(data_dir):
    task = benchmark_task("xstest", "T1", "free_form", 3, check_active=False, fewshot_draw="per_item")
    assert task.metadata["fewshot_draw"] == "per_item"
    from safetyrepro.compat.inspect_ai import PrerequisiteError

    said = r"unknown few-shot draw 'items' \(did you mean 'per_item'\?\); allowed: fixed, per_item"
    with pytest.raises(PrerequisiteError, match="safetyrepro/xstest: " + said):
        benchmark_task("xstest", "T1", "free_form", 3, check_active=False, fewshot_draw="items")


def _spec(**kw) -> SweepSpec:
    return SweepSpec(("a",), ("xstest",), "full", "lm-eval", "bf16", None, "sha", **kw)


def test_a_sweep_records_the_draw_and_never_resumes_across_draws():
    fixed, per_item = _spec().identity(), _spec(fewshot_draw="per_item").identity()
    assert "fewshot_draw" not in fixed  # a default sweep's sweep.json reads as before
    assert per_item["fewshot_draw"] == "per_item"
    assert identity_changes(fixed, per_item) == ["fewshot_draw"]
    assert identity_changes(per_item, fixed) == ["fewshot_draw"]  # the other way round too
    assert identity_changes(fixed, fixed) == [] and identity_changes({**fixed, "fewshot_draw": "fixed"}, fixed) == []


def test_a_sweep_folder_of_one_draw_is_not_resumed_with_the_other(tmp_path):
    from safetyrepro.sweep.store import Store

    per_item = _spec(fewshot_draw="per_item").identity()
    (tmp_path / "cells" / "a").mkdir(parents=True)
    (tmp_path / "cells" / "a" / "cell.json").write_text("{}")
    (tmp_path / "sweep.json").write_text(json.dumps(per_item))
    with pytest.raises(UserError, match=r"other settings \(fewshot_draw: 'per_item', now 'fixed'\)"):
        Store(tmp_path).check_identity(_spec().identity(), False)
    (tmp_path / "sweep.json").write_text(json.dumps(_spec().identity()))  # an earlier sweep: no key, fixed
    with pytest.raises(UserError, match=r"other settings \(fewshot_draw: 'fixed', now 'per_item'\)"):
        Store(tmp_path).check_identity(per_item, False)
    assert Store(tmp_path).check_identity(_spec().identity(), False) == _spec().identity()


def _certify_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(with_current_spelling(["certify", *argv]))


def test_certify_says_what_its_claims_generalise_over_with_each_draw():
    live = ("--out", "o", "--models", "smollm2", "gemma3-270m")
    assert options_from(_certify_args(*live)).fewshot_draw == "fixed"
    options = options_from(_certify_args(*live, "--fewshot-draw", "per_item"))
    assert options.fewshot_draw == "per_item"
    assert target_words("population", "fixed") == TARGET_WORDS["population"]
    assert "this one draw of few-shot examples" in TARGET_WORDS["population"]
    said = target_words("population", "per_item")
    assert said == PER_ITEM_WORDS and "each drawn with its own few-shot examples" in said
    assert "few-shot" not in said.split("hold fixed")[1]  # the draw is no longer among what is held fixed
    assert target_words("subset", "per_item") == TARGET_WORDS["subset"]  # this sample's numbers either way
