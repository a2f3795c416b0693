"""docs/api.md's Python examples run as written: the worked example on a grid an import wrote (runs/x)
and the importers' example on lm-eval output folders (runs/lm-eval), in a scratch folder."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from lm_eval_fixtures import write_run

from safetyrepro.importers import import_lm_eval

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_examples_of_docs_api_md_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = Path("runs/lm-eval")
    # three models at 0 and 3 shots; with and without the chat template (what the second example imports)
    scores = {"smollm2": [4, 3, 2, 5], "qwen": [3, 4, 2, 1], "gemma": [5, 1, 3, 3]}
    i = 0
    for model, ks in scores.items():
        for k, (shots, chat) in zip(ks, [(0, True), (3, True), (0, False), (3, False)], strict=True):
            write_run(
                runs,
                scores=[1.0] * k + [0.0] * (6 - k),
                shots=shots,
                chat=chat,
                model=model,
                weights=None,
                i=i,
                folder=f"{model}/{i}",
            )
            i += 1
    Path("mapping.yaml").write_text("tasks: []\n")
    # runs/x: the chat-template runs alone, inside the packaged envelope, as a sweep's grid would be
    chat_only = [str(p) for p in runs.rglob("results_*.json") if '"chat_template_sha": null' not in p.read_text()]
    import_lm_eval(chat_only).write("runs/x")
    first, second, *_ = blocks()  # the third is the engine's (tests/certify/test_engine_doc_example.py)
    scope: dict = {}
    exec(compile(first, str(DOC), "exec"), scope)
    assert Path("runs/x/analysis/report.md").is_file() and Path("runs/x/analysis/grid_card.md").is_file()
    rho = scope["api"].rho_flip(scope["grid"]).set_index(["model_a", "model_b"])
    # gemma vs qwen at 0 and 3 shots: 5>3 (+), 1<4 (-)
    assert (rho.loc[("gemma", "qwen"), "n_plus"], rho.loc[("gemma", "qwen"), "n_minus"]) == (1, 1)
    exec(compile(second, str(DOC), "exec"), scope)
    imported = scope["imported"]
    assert len(imported.grid) == 12 and imported.unmapped.empty and imported.disagreements.empty
    assert Path("runs/imported/rules.yaml").is_file()
    full = scope["a"].rho_flip_detail
    full = full[full["slice"] == "full"].set_index(["model_a", "model_b"])
    # qwen vs smollm2 over four configurations: 3<4, 4>3, 2=2, 1<5
    assert tuple(full.loc[("qwen", "smollm2"), ["n_plus", "n_minus", "n_zero", "n_configs"]]) == (1, 2, 1, 4)
    assert isinstance(imported.items, pd.DataFrame) and len(imported.items) == 12 * 6
