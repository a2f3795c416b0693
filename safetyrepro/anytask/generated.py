"""The scores of a multiple-choice task's generated twin (`axes.scoring: [own, generate_until]`, docs/any_task.md):
`acc`, as the task's likelihood scoring reports it (so the importer keeps both scorings in one package), and
`parse_rate`, whether the reply was read as one of the choices, so that the twin's verdicts get the readable/format
split of generated answers. The sweep writes a small module beside the twin's task YAML that binds a `Scorer` to the
task's choice and target expressions; lm-eval calls it as the task's `process_results`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CLOSING = ".,;:!?"  # a sentence's last mark: "5." is the choice "5"; a sign ("-3") or a decimal point stays


def normalized(text: Any) -> str:
    """The answer as matched: case, runs of spaces and the closing mark of a sentence aside."""
    return " ".join(str(text).strip().rstrip(CLOSING).lower().split())


def scores(reply: Any, choices: list[Any], answer: Any) -> dict[str, float]:
    """acc: the reply (to the end of its line) is the right choice's text; parse_rate: it is one of the choices'
    texts (a reply that names none is unread, and counts as wrong)."""
    said = normalized(reply)
    return {
        "acc": float(said == normalized(answer)),
        "parse_rate": float(said in {normalized(c) for c in choices}),
    }


# the right choice's text, from the task's choices c and target t (an index into them, or the text itself): the one
# rule both the twin's shown target (its doc_to_target) and its score read
ANSWER = "c[t] if t is number else t"


def bound(choices: str, target: str, expression: str) -> str:
    """A Jinja template that binds the task's choice and target expressions to c and t, then prints `expression`."""
    return f"{{% set c = {choices} %}}{{% set t = {target} %}}{{{{ {expression} }}}}"


@dataclass(frozen=True)
class Scorer:
    """lm-eval's `process_results(doc, results)` for one twin: the task's choice and target expressions (Jinja, as
    its YAML writes them) read for each document as lm-eval reads them."""

    choices: str
    target: str

    def __call__(self, doc: dict, results: list[Any]) -> dict[str, float]:
        from lm_eval.utils import apply_template  # lm-eval's own rendering of a task YAML's Jinja

        choices, answer = json.loads(apply_template(bound(self.choices, self.target, f"[c, ({ANSWER})] | tojson"), doc))
        return scores(results[0] if results else "", list(choices), answer)


def module_text(task: str, choices: str, target: str) -> str:
    """The module the twin's YAML names as its process_results (`!function <module>.process_results`)."""
    return (
        f'"""The generated twin of lm-eval task {task!r}, scored (safetyrepro sweep --task): acc and parse_rate."""\n\n'
        "from safetyrepro.anytask.generated import Scorer\n\n"
        # a JSON string is a Python literal too, and double-quoted as ruff formats one
        f"process_results = Scorer(choices={json.dumps(choices)}, target={json.dumps(target)})\n"
    )
