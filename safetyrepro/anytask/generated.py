"""The score of a multiple-choice task's generated twin (`axes.scoring: [own, generate_until]`, docs/any_task.md):
lm-eval imports it by name from the twin's task YAML (`metric: !function safetyrepro.anytask.generated.acc`), so
that the twin reports `acc` as the task's likelihood scoring does and the importer keeps both in one package."""

from __future__ import annotations

from typing import Any

CLOSING = ".,;:!?"  # a sentence's last mark: "5." is the choice "5"; a sign ("-3") or a decimal point stays


def normalized(text: Any) -> str:
    """The answer as matched: case, runs of spaces and the closing mark of a sentence aside."""
    return " ".join(str(text).strip().rstrip(CLOSING).lower().split())


def acc(references: list[Any], predictions: list[Any], **_: Any) -> float:
    """1.0 when the generated answer (to the end of its line) is the right choice's text (`normalized`), else 0.0."""
    return float(normalized(predictions[0]) == normalized(references[0]))
