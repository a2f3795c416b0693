"""What one package did on one item, in one shape for every package (the unit of Table 7 and of the
agreement check)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from safetyrepro.atomic import atomic_write


def question_key(text: str) -> str:
    """Identity of a TruthfulQA question across data versions (whitespace and case folded)."""
    return "truthfulqa:" + re.sub(r"\s+", " ", text).strip().lower()


def bbq_key(category: str, example_id: int | str) -> str:
    return f"bbq:{category}:{int(example_id)}"


def toxigen_key(row: int) -> str:
    return f"toxigen:{int(row)}"


@dataclass
class ItemRecord:
    """One scored item of one stack.

    `options` are the candidate texts in the order the stack presented or scored them, `gold` the
    indices that count as correct, `choice` the index the stack picked (None: unparsed / no answer).
    """

    package: str
    benchmark: str
    key: str  # identity across packages (question_key / bbq_key / toxigen_key)
    native_id: str
    options: list[str]
    gold: list[int]
    choice: int | None
    correct: bool
    prompt: str = ""  # the string the model saw (after any chat template), where the package records it
    output: str = ""  # generated text, or the candidates' log-likelihoods as JSON
    meta: dict = field(default_factory=dict)

    @property
    def choice_text(self) -> str | None:
        return None if self.choice is None else self.options[self.choice]

    def to_dict(self) -> dict:
        return asdict(self)


def write_records(path: Path, records: Iterable[ItemRecord]) -> None:
    atomic_write(path, "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records))


def read_records(path: Path) -> list[ItemRecord]:
    with open(path, encoding="utf-8") as f:
        return [ItemRecord(**json.loads(line)) for line in f if line.strip()]


def score(records: Sequence[ItemRecord]) -> float:
    return sum(r.correct for r in records) / len(records) if records else float("nan")
