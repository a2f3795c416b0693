"""lm-eval's own arc_easy task pointed at a local file of 60 arithmetic questions: the task SafetyRepro's
verdict fixtures were made with (tests/importers/fixtures/any_task/make_fixtures.py writes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

MAKE = Path(__file__).parents[1] / "importers" / "fixtures" / "any_task" / "make_fixtures.py"


def arc_easy_local(folder: Path) -> Path:
    """The task YAML (`arc_easy_local`, including lm-eval's arc_easy.yaml) written under `folder`."""
    spec = importlib.util.spec_from_file_location("any_task_fixtures", MAKE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_task(Path(folder)) / "arc_easy_local.yaml"
