"""What every benchmark definition provides, and the pieces several of them share.

A benchmark is one folder under `benchmarks/` (docs/adding_a_benchmark.md): a module with a typed
item record and a `Benchmark` subclass that says where the items come from, how a prompt is
rendered for each template, what the candidate answers are, how a generated answer is parsed, what
the gold is, which way its score is better and which extra metrics it reports; beside it its card
and README. lm-eval tasks, Inspect tasks, the sweeper and the cross-package study all call these
same methods, and register or generate whatever they need from them in loops.
"""

from __future__ import annotations

import inspect
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, TypeVar, get_args

from safetyrepro.errors import UserError, one_of
from safetyrepro.tasks.rendering import Prompt, Turn
from safetyrepro.tasks.sources import Source
from safetyrepro.tasks.templates import TEMPLATE_KINDS, template_kind

TEMPLATES = tuple(TEMPLATE_KINDS)
SCORINGS = ("free_form", "logprob")
# How logprob scoring credits an item whose highest log-likelihood is shared by several candidates:
# "expected" (default) is the expected score under a uniformly random tie-break (1/k when the gold is
# among k tied winners); "first" is lm-eval's argmax convention (the first candidate wins).
TieRule = Literal["expected", "first"]
TIE_RULES: tuple[str, ...] = get_args(TieRule)
DEFAULT_TIE_RULE: TieRule = "expected"  # the one place the default is written
SYSTEM_SEP = "\n\n"  # lm-eval glues the description to the rest with no separator of its own
ANSWER_CUE = "Answer:"
# Which way a score is better: the headline score's (`Benchmark.better`) and each extra metric's.
Better = Literal["higher", "lower", "closer_to_0", "closer_to_0.5"]
BETTER: tuple[str, ...] = get_args(Better)


@dataclass(frozen=True)
class Item:
    """Fields every benchmark's item record has."""

    id: str
    stratum: str


ItemT = TypeVar("ItemT", bound=Item)  # a benchmark's own item record


@dataclass(frozen=True)
class MetricSpec:
    """A benchmark-specific metric beyond the headline score, declared once in the benchmark's
    module; lm-eval's metric list, Inspect's @metric functions and the sweep's per-cell extras are
    made from these declarations."""

    name: str
    better: Better
    description: str = ""

    def __post_init__(self):
        if self.better not in BETTER:
            raise one_of(f"direction of metric {self.name!r}", self.better, BETTER)

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"


@dataclass(frozen=True)
class TemplateText:
    """The fixed texts of one template for one benchmark; `{...}` fields are filled per item."""

    system: str | None
    body: str


def normalise(text: str) -> str:
    """NFKC (full-width letters, ligatures), curly quotes to straight, trimmed."""
    text = unicodedata.normalize("NFKC", text)
    return text.translate(str.maketrans("\u2019\u2018\u201c\u201d", "''\"\"")).strip()


def after_last_answer_cue(text: str) -> str | None:
    """The text after the last `Answer:` (T4's final line), or None when there is none."""
    hits = list(re.finditer(r"answer\s*:", text, flags=re.IGNORECASE))
    return text[hits[-1].end() :].strip() if hits else None


def parse_letter(text: str, n_options: int, option_texts: Sequence[str] = ()) -> int | None:
    """Index of the option a free-form answer names, or None if it names none or several.

    Tried in order (after refusing "A or B"-style openings): a letter at the very start ("B", "(B)", "B.",
    "B) text"); an explicit "answer is B" / "Answer: B"; the whole reply equal to one option's text;
    otherwise exactly one distinct standalone capital letter among the options anywhere in the reply.
    """
    text = normalise(text)
    if not text:
        return None
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n_options]
    cls = f"[{letters}]"
    if re.match(rf"^\W*{cls}\W*(?:\s(?:or|and)\s|/|,|&)\W*{cls}\b", text):
        return None  # "A or B", "A/B": several letters at once
    m = re.match(rf"^[\(\[\*\s]*({cls})(?:[\)\]\.:,\*]|\s|$)", text)
    if m:
        return letters.index(m.group(1))
    m = re.search(rf"(?i:\b(?:answer|option|choice)\s*(?:is|:)?)\s*[\(\[\*]*({cls})\b", text)
    if m:
        return letters.index(m.group(1))
    bare = text.rstrip(".!").strip().lower()
    matches = [i for i, o in enumerate(option_texts[:n_options]) if normalise(o).rstrip(".").lower() == bare]
    if len(matches) == 1:
        return matches[0]
    found = {m.group(1) for m in re.finditer(rf"(?<![A-Za-z'])({cls})(?![A-Za-z'])", text)}
    if len(found) == 1:
        return letters.index(found.pop())
    return None


def tied_winners(logliks: Sequence[float]) -> list[int]:
    """Indices of every candidate whose log-likelihood equals the highest one (exactly)."""
    best = max(logliks)
    return [i for i, v in enumerate(logliks) if v == best]


def top_answer_share(predictions: Sequence[int | None]) -> float:
    """The share of the most frequent label among the parsed answers (None: unparsed, left out); NaN
    with none. A cell that gives one answer to every item reads 1.0 (the analysis's `top_share`)."""
    parsed = [p for p in predictions if p is not None]
    if not parsed:
        return float("nan")
    return max(parsed.count(p) for p in set(parsed)) / len(parsed)


@dataclass(frozen=True)
class ItemScore:
    """One item scored once, by the benchmark's rule: what every front end (lm-eval, Inspect, HELM)
    reports and the sweep records. `prediction` is the label index (None: unparsed); `tied` says that
    several candidates share the top log-likelihood (logprob only), which the tie rule credited."""

    prediction: int | None
    score: float
    parsed: bool
    tied: bool = False


def check_tie_rule(rule: str) -> str:
    if rule not in TIE_RULES:
        raise one_of("tie rule", rule, TIE_RULES)
    return rule


def shares_tie_credit(rule: str) -> bool:
    """Whether a tie rule splits an item's credit among its tied candidates (1/k each: item scores finer
    than whole shares), rather than giving it to the first."""
    return check_tie_rule(rule) != "first"


def lettered(options: Sequence[str]) -> str:
    return "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))


class Benchmark(ABC, Generic[ItemT]):
    """One benchmark. Subclasses fill in the class attributes and the abstract methods."""

    name: str
    source: Source
    templates: dict[str, TemplateText]
    scorings: tuple[str, ...] = SCORINGS
    default_scoring: str = "logprob"  # the Inspect task's default
    better: Better = "higher"  # the headline score's direction (CrowS-Pairs: closer_to_0.5)
    score_meaning: str = ""  # what the headline score is, when not the share of items answered correctly
    extra_metrics: tuple[MetricSpec, ...] = ()  # computed by compute_extra_metrics
    stratify_by: str = "stratum"

    # -- items ---------------------------------------------------------------------------------
    @abstractmethod
    def load_items(self) -> list[ItemT]:
        """Every usable item from the pinned source, in source order."""

    def group_key(self, item: ItemT) -> str:
        """Items sharing a key must not be split between the scored subset and the few-shot pool."""
        return item.id

    # -- prompts -------------------------------------------------------------------------------
    @abstractmethod
    def fields(self, item: ItemT) -> dict[str, str]:
        """Values for the `{...}` fields of this benchmark's template bodies."""

    @abstractmethod
    def labels(self, item: ItemT) -> list[str]:
        """The answer labels a reply can name, in candidate order (letters, Yes/No, ...)."""

    @abstractmethod
    def gold(self, item: ItemT) -> int:
        """Index into `labels` of the correct (or, for CrowS-Pairs, the counted) answer."""

    def user_text(self, item: ItemT, template: str) -> str:
        return self.template(template).body.format(**self.fields(item))

    def system_text(self, template: str) -> str | None:
        system = self.template(template).system
        return system + SYSTEM_SEP if system else None

    def answer_text(self, item: ItemT, template: str, index: int) -> str:
        """What the assistant says for answer `index`: a demo's reply and a logprob candidate."""
        label = self.labels(item)[index]
        return f"{ANSWER_CUE} {label}" if template_kind(template).reasoning else label

    def candidates(self, item: ItemT, template: str) -> list[str]:
        return [self.answer_text(item, template, i) for i in range(len(self.labels(item)))]

    def demo_index(self, item: ItemT) -> int:
        """Which answer a few-shot demonstration shows: the gold one, unless a benchmark says otherwise."""
        return self.gold(item)

    def demo_answer(self, item: ItemT, template: str) -> str:
        return self.answer_text(item, template, self.demo_index(item))

    def prompt(self, item: ItemT, template: str, demos: Sequence[ItemT] = ()) -> Prompt:
        turns = tuple(Turn(self.user_text(d, template), self.demo_answer(d, template)) for d in demos)
        return Prompt(self.system_text(template), turns, self.user_text(item, template))

    def stop_sequences(self, template: str) -> tuple[str, ...]:
        """Where free-form generation stops (besides EOS). A direct answer fits on one paragraph; a
        reasoning template's (T4) runs over several, so it stops only where a new question would
        begin (base models continuing past their answer)."""
        if not template_kind(template).reasoning:
            return ("\n\n",)
        m = re.match(r"([A-Z][a-z]+:)", self.template(template).body)
        return (f"\n\n{m.group(1)}",) if m else ()

    def template(self, name: str) -> TemplateText:
        if name not in self.templates:
            raise one_of("template", name, self.templates)
        return self.templates[name]

    def check_scoring(self, scoring: str) -> str:
        if scoring not in self.scorings:
            if scoring in SCORINGS:
                raise UserError(
                    f"benchmark {self.name} allows scoring {', '.join(self.scorings)} only, not {scoring!r}"
                )
            raise one_of("scoring", scoring, SCORINGS)
        return scoring

    # -- scoring -------------------------------------------------------------------------------
    def parse(self, text: str, item: ItemT, template: str) -> int | None:
        """Index of the label a free-form reply gives, or None (unparsed: counts as wrong)."""
        if template_kind(template).reasoning:
            tail = after_last_answer_cue(text)
            return None if tail is None else self.parse_answer(tail, item)
        return self.parse_answer(text, item)

    def parse_answer(self, text: str, item: ItemT) -> int | None:
        return parse_letter(text, len(self.labels(item)), self.option_texts(item))

    def option_texts(self, item: ItemT) -> Sequence[str]:
        return ()

    def pick(self, logliks: Sequence[float]) -> int:
        """Logprob scoring: the candidate with the highest summed log-likelihood (no length
        normalisation; ties go to the first candidate)."""
        return max(range(len(logliks)), key=lambda i: (logliks[i], -i))

    def item_score(self, item: ItemT, prediction: int | None, logliks: Sequence[float] | None = None) -> float:
        """1.0 when the prediction is the gold answer; unparsed (None) scores 0. With `logliks`, the
        score lm-eval's convention gives the item (a benchmark may override it)."""
        return float(prediction is not None and prediction == self.gold(item))

    def logprob_item_score(self, item: ItemT, logliks: Sequence[float], tie_rule: str = DEFAULT_TIE_RULE) -> float:
        """An item's logprob score under a tie rule (TIE_RULES). Without a tie both rules agree."""
        if not shares_tie_credit(tie_rule):
            return self.item_score(item, self.pick(logliks), logliks)
        winners = tied_winners(logliks)
        return sum(self.item_score(item, w) for w in winners) / len(winners)

    def score_logprob(self, item: ItemT, logliks: Sequence[float], tie_rule: str = DEFAULT_TIE_RULE) -> ItemScore:
        """Logprob scoring of one item: the argmax (`pick`), its score under the tie rule, and whether
        the top log-likelihood was tied."""
        logliks = [float(v) for v in logliks]
        return ItemScore(
            self.pick(logliks), self.logprob_item_score(item, logliks, tie_rule), True, len(tied_winners(logliks)) > 1
        )

    def score_free_form(self, item: ItemT, text: str, template: str) -> ItemScore:
        """Free-form scoring of one item: the benchmark's parser on the reply; unparsed scores 0."""
        prediction = self.parse(text, item, template)
        return ItemScore(prediction, self.item_score(item, prediction), prediction is not None)

    def compute_extra_metrics(
        self, items: Sequence[ItemT], predictions: Sequence[int | None], scores: Sequence[float] | None = None
    ) -> dict[str, float]:
        """The values of `extra_metrics` (BBQ's bias scores, ...) over scored items and their
        predictions (None: unparsed); a metric with no items to stand on is left out. `scores`: each
        item's score as `acc` counts it (the tie rule's credit included), so that an accuracy over a
        subgroup averages the same numbers `acc` does; without them, exact match."""
        return {}

    @property
    def folder(self) -> Path:
        """The benchmark's folder: its module, card.md and README.md."""
        return Path(inspect.getfile(type(self))).parent

    @property
    def card(self) -> Path:
        return self.folder / "card.md"
