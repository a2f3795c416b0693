"""An anytime-valid early-stopping manager for any Inspect task (Inspect's `EarlyStopping` protocol, 0.3.154 on):

    from inspect_ai import eval, task_with
    from safetyrepro.stopping import stop_when_known, stop_when_certified, with_anytime_stopping

    eval(with_anytime_stopping(my_task(), stop_when_known(width=0.1)), model=...)
    eval(with_anytime_stopping(my_task(), stop_when_certified("logs/reference.eval", margin=0.05)), model=...)

`stop_when_known`: stop when the task's mean score is known within `width`. `stop_when_certified`: each
sample's score minus a reference log's score on the same sample (another model, same sample id, same input and
target); stop when the difference is certified (or certified within +-margin). The rules and their guarantee
are rule.py's: the confidence sequences of `certify`'s population target, valid at whichever sample the run
stops. `task_with(task, early_stopping=manager)` works too (no shuffle).

The samples enter the sequence in the order Inspect schedules them (the dataset's order, epoch 1 first), each
once all its epochs are scored (an item's epochs are one draw, not several), and a sample completed out of
turn waits for the ones before it: the order the values arrive in never depends on how long a model took, or
on its answers. The guarantee treats that order as random: `with_anytime_stopping` shuffles the dataset
(seeded) first; a task passed to `task_with` keeps its order, and the summary says which it was. Once a rule
stops, every sample not yet started is stopped (Inspect records each as an early stop); samples already
running finish and are logged, outside the decision. The decision, its numbers and the counts are the log's
early-stopping summary (`log.results.early_stopping.metadata`).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import random
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetyrepro.importers.task_scores import ItemScores, read_run, sample_key
from safetyrepro.sequential.stopping import BIASED, COVERAGE, KNOWN, UNDECIDED, Decisions, SequentialRule, StoppingRule

if TYPE_CHECKING:
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.log import EvalSpec
    from inspect_ai.scorer import SampleScore
    from inspect_ai.util import EarlyStop

MANAGER = "safetyrepro.stopping"
TARGET = "population: the samples as draws from the task (certify's population target)"
CLAIMS = {
    "a_better": "the evaluated model is better than the reference",
    "b_better": "the reference is better than the evaluated model",
    "within_delta": "the two are within the margin",
    KNOWN: "the mean is known within the width",
}


# Which eval's state a protocol call is for: Inspect's calls do not say, and eval(..., model=[a, b]) runs one eval
# per model with the same manager. start_task runs in the eval's own asyncio task, and the samples' tasks are made
# after it, so a context variable set there reaches every call of that eval and of no other.
_EVAL: ContextVar[AnytimeStopping | None] = ContextVar("safetyrepro_stopping_eval", default=None)


def _float(x: Any) -> float | None:
    return None if x is None else float(x)


class AnytimeStopping:
    """An Inspect early-stopping manager for `rule`. `scorer`: whose scores the rule reads (default: the only
    one; the first if several). `reference` (paired rule): a log of another model on the same samples.
    `higher_is_better`: how the paired claims read (False: the lower score is the better one)."""

    def __init__(
        self,
        rule: StoppingRule,
        scorer: str | None = None,
        reference: str | None = None,
        higher_is_better: bool = True,
    ):
        if (rule.mode == "paired") != (reference is not None):
            raise ValueError("the paired rule needs a reference log, and only the paired rule takes one")
        self.rule, self.named_scorer, self.sign = rule, scorer, 1.0 if higher_is_better else -1.0
        self.reference = reference
        self.reference_run = read_run(reference) if reference is not None else None
        self.shuffle_seed: int | None = None  # set by with_anytime_stopping
        self.runs: list[AnytimeStopping] = []  # one copy per eval running now (start_task)
        self.reset_state()

    def reset_state(self) -> None:
        """A fresh eval's state: a rule object reused for a later eval starts from nothing."""
        self.scorer = self.named_scorer
        self.sequence = SequentialRule(self.rule)
        self.order: list[str] = []
        self.epochs = 1
        self.shuffled: Any = None  # Inspect's sample_shuffle, as the eval recorded it
        self.task_name = ""
        self.model = ""
        self.ref_scores: ItemScores | None = None
        self.unpaired: dict[str, str] = {}  # sample id -> why it cannot be paired with the reference
        self.scores: dict[str, dict[int, float]] = {}  # sample id -> epoch -> score
        self.next = 0  # position in `order` of the next sample to enter the sequence
        self.used: list[str] = []
        self.decision: Decisions | None = None
        self.stopped_after: int | None = None
        self.sentence = ""
        self.unscored: list[str] = []  # samples never scored (errored or cancelled), skipped at the end
        self.late: int | None = None  # with them skipped, the rule was met after this many samples (too late)

    # -- the protocol ---------------------------------------------------------------------------
    async def start_task(self, task: EvalSpec, samples: list[Sample], epochs: int) -> str:
        """A fresh state for this eval (a copy of the rule, keyed by the eval's context): two evals sharing one
        manager, at once or one after the other, never see each other's scores."""
        run = copy.copy(self)
        run.reset_state()
        run.runs = []
        name = await run.begin(task, samples, epochs)
        self.runs.append(run)
        _EVAL.set(run)
        return name

    def _run(self) -> AnytimeStopping:
        run = _EVAL.get()
        if run is not None and run in self.runs:
            return run
        if not self.runs:
            return self  # the protocol called directly, without start_task's copy
        raise ValueError(
            "safetyrepro.stopping: a call for an eval this manager cannot tell apart from the others sharing it; give "
            "each eval its own stop_when_known(...) / stop_when_certified(...)"
        )

    async def begin(self, task: EvalSpec, samples: list[Sample], epochs: int) -> str:
        scorers = [s.name for s in task.scorers or []]
        if self.scorer is not None and scorers and self.scorer not in scorers:
            raise ValueError(
                f"safetyrepro.stopping: scorer {self.scorer!r} is not one of the task's scorers "
                f"({', '.join(scorers)}){_nearest(self.scorer, scorers)}; no sample was run"
            )
        self.order = [str(s.id) for s in samples]
        self.epochs = int(epochs)
        self.task_name = str(task.task)
        self.model = str(task.model)
        self.shuffled = getattr(task.config, "sample_shuffle", None)
        if self.reference_run is not None:
            self._pair_with_reference(samples)
        return MANAGER

    async def schedule_sample(self, id: str | int, epoch: int) -> EarlyStop | None:
        run = self._run()
        if run.decision is None:
            return None
        from inspect_ai.util import EarlyStop

        return EarlyStop(id=id, epoch=epoch, reason=f"anytime-valid stop: {run.sentence}")

    async def complete_sample(self, id: str | int, epoch: int, scores: dict[str, SampleScore]) -> None:
        await self._run().take_sample(id, epoch, scores)

    async def take_sample(self, id: str | int, epoch: int, scores: dict[str, SampleScore]) -> None:
        from inspect_ai.scorer import value_to_float

        if self.scorer is None:
            self.scorer = next(iter(scores))
        if self.scorer not in scores:
            raise ValueError(f"scorer {self.scorer!r} gave no score for sample {id} (scorers: {', '.join(scores)})")
        value = float(value_to_float()(scores[self.scorer].score.value))
        self.scores.setdefault(str(id), {})[int(epoch)] = value
        self._advance()

    async def complete_task(self) -> dict[str, Any]:
        run = self._run()
        if run is not self:
            self.runs.remove(run)
        return run.summary_now()

    def summary_now(self) -> dict[str, Any]:
        self._skip_unscored()
        now = self.sequence.decide()
        return {
            "rule": self.rule.describe(),
            "mode": self.rule.mode,
            "alpha": self.rule.alpha,
            "width": self.rule.width,
            "margin": self.rule.margin,
            "target": TARGET,
            "what_a_stop_means": COVERAGE[self.rule.mode],
            "estimate_note": BIASED,
            "confidence_sequence": "betting e-processes (sequential/confidence_sequence.py, IidBettingCS), "
            "closed testing for the paired claims",
            "scorer": self.scorer,
            "model": self.model,
            "order": self._order_note(),
            "samples": len(self.order),
            "epochs": self.epochs,
            "stopped": self.decision is not None,
            "stopped_after": self.stopped_after,
            "decision": self._numbers(self.decision) if self.decision is not None else None,
            "sentence": self.sentence or self._undecided_sentence(now),
            "final": self._numbers(now),
            "reference": self._reference_note(),
            "unpaired": len(self.unpaired),
            "unpaired_examples": dict(list(self.unpaired.items())[:5]),
            "unscored": len(self.unscored),
            "unscored_examples": self.unscored[:5],
            "met_after_skipping": self.late,
        }

    def _skip_unscored(self) -> None:
        """At the end of the eval, the samples that were never scored (an error, a cancel) are skipped with a word,
        and the samples after them enter the sequence in their turn: its final numbers read every scored sample,
        valid as any look of an anytime-valid sequence is (stopping early was lost after the first of them)."""
        decided_before = self.decision is not None
        while self.next < len(self.order):
            sid = self.order[self.next]
            if sid not in self.unpaired and len(self.scores.get(sid, {})) < self.epochs:
                if sid not in self.scores and self.decision is not None:
                    break  # stopped by the rule: the samples not run were stopped, not failed
                self.unscored.append(sid)
                self.unpaired[sid] = "never scored in every epoch (it errored or was cancelled)"
            self._advance()
        if self.unscored and not decided_before and self.decision is not None:
            self.late = self.stopped_after
            self.decision = None  # it did not stop the eval: the summary says so
            self.stopped_after = None
            self.sentence = ""

    # -- the sequence -----------------------------------------------------------------------------
    def _pair_with_reference(self, samples: list[Sample]) -> None:
        run = self.reference_run
        assert run is not None
        mine = [t for t in run.tasks if self.scorer is None or t.metric == self.scorer]
        same_task = [t for t in mine if t.task == self.task_name]
        chosen = same_task or mine
        if not chosen:
            have = ", ".join(f"{t.task} ({t.metric})" for t in run.tasks)
            raise ValueError(f"reference {self.reference} has no scores for scorer {self.scorer!r} (it has: {have})")
        if len({t.task for t in chosen}) > 1 or len(chosen) > 1 and self.scorer is None:
            have = ", ".join(f"{t.task} ({t.metric})" for t in chosen)
            raise ValueError(f"reference {self.reference} holds several scorers or tasks ({have}): name the scorer")
        self.ref_scores = chosen[0]
        self.scorer = self.scorer or self.ref_scores.metric
        held = {item for item, _ in self.ref_scores.scores}
        for s in samples:
            sid = str(s.id)
            if sid not in held:
                self.unpaired[sid] = "not in the reference log"
            elif self.ref_scores.items.get(sid) != sample_key(s.input, s.target):
                self.unpaired[sid] = "its input or target differs from the reference log's"

    def _value(self, sid: str) -> float | None:
        """The sample's value for the sequence (None: it does not enter): its epoch mean, or that minus the
        reference's mean over the same epochs."""
        mine = self.scores[sid]
        if self.rule.mode == "mean":
            return sum(mine.values()) / len(mine)
        assert self.ref_scores is not None
        ref = self.ref_scores.scores
        common = [e for e in mine if (sid, e) in ref]
        if not common:
            self.unpaired[sid] = "the reference log scored none of its epochs"
            return None
        diff = sum(mine[e] - ref[(sid, e)] for e in common) / len(common)
        return self.sign * diff

    def _advance(self) -> None:
        """Feed the samples whose turn has come, in order, and decide after each."""
        while self.next < len(self.order):
            sid = self.order[self.next]
            if sid not in self.unpaired and len(self.scores.get(sid, {})) < self.epochs:
                return  # its turn, not yet scored in every epoch: the ones after it wait
            self.next += 1
            if sid in self.unpaired:
                continue
            value = self._value(sid)
            if value is None:
                continue
            self.sequence.update([0], [value])
            self.used.append(sid)
            if self.decision is None:
                now = self.sequence.decide()
                if bool(now.stop[0]):
                    self.decision, self.stopped_after = now, len(self.used)
                    self.sentence = self._sentence(now)

    # -- what the summary says --------------------------------------------------------------------
    def _raw(self, lower: float, upper: float, estimate: float) -> tuple[float, float, float]:
        """Bounds and estimate of the paired difference as evaluated - reference, whatever the reading."""
        if self.sign > 0:
            return lower, upper, estimate
        return -upper, -lower, -estimate

    def _numbers(self, d: Decisions) -> dict[str, Any]:
        lower, upper, estimate = float(d.lower[0]), float(d.upper[0]), float(d.estimate[0])
        if self.rule.mode == "paired":
            lower, upper, estimate = self._raw(lower, upper, estimate)
        out: dict[str, Any] = {
            "n": int(d.n[0]),
            "estimate": _float(estimate) if d.n[0] else None,
            "lower": lower,
            "upper": upper,
            "claim": str(d.claim[0]),
        }
        if self.rule.mode == "paired":
            out["p_values"] = {
                name: float(d.p_values[0, i])
                for i, name in enumerate(
                    ("not_evaluated_better", "not_reference_better", "not_below_margin", "not_above_margin")
                )
            }
        return out

    def _what(self) -> str:
        if self.rule.mode == "mean":
            return f"the mean {self.scorer} score"
        ref = self.reference_run.model if self.reference_run is not None else "the reference"
        return f"the paired difference in {self.scorer} (evaluated - reference {ref})"

    def _sentence(self, d: Decisions) -> str:
        n = self._numbers(d)
        total = len(self.order) - len(self.unpaired)
        head = CLAIMS.get(n["claim"], n["claim"])
        test = ""
        if self.rule.mode == "paired":
            p = n["p_values"]
            key = {"a_better": "not_evaluated_better", "b_better": "not_reference_better"}.get(n["claim"])
            shown = p[key] if key else max(p["not_below_margin"], p["not_above_margin"])
            test = f"anytime p = {shown:.2g}, closed testing at alpha {self.rule.alpha:g}; "
        return (
            f"{head} ({test}{TARGET.split(':')[0]}): {self._what()} is between {n['lower']:.3f} and {n['upper']:.3f} "
            f"(confidence sequence, {1 - self.rule.alpha:g}) after {n['n']} of {total} samples; the mean of those, "
            f"{n['estimate']:.3f}, is biased by the stop the data chose (read the interval)"
        )

    def _undecided_sentence(self, d: Decisions) -> str:
        n = self._numbers(d)
        if not n["n"]:
            return f"no sample entered the sequence: nothing is known of {self._what()}"
        said = (
            f"not stopped: after {n['n']} samples {self._what()} is {n['estimate']:.3f}, within "
            f"[{n['lower']:.3f}, {n['upper']:.3f}] at confidence {1 - self.rule.alpha:g}"
        )
        if not self.unscored:
            return said + f"; the rule ({self.rule.describe()}) was not met"
        first = self.unscored[0]
        met = (
            f"; the rule was met after {self.late} samples once they were skipped, too late to stop the eval"
            if self.late
            else f"; the rule ({self.rule.describe()}) was not met"
        )
        return (
            f"{said}. {len(self.unscored)} sample(s) were never scored (first: {first}; errored or cancelled): the "
            f"samples after {first} waited for its turn, so the rule could not stop the eval after it{met}"
        )

    def _order_note(self) -> str:
        if self.shuffle_seed is not None:
            return f"shuffled by with_anytime_stopping (seed {self.shuffle_seed}), then in the order scheduled"
        if self.shuffled not in (None, False):
            return f"Inspect's sample shuffle ({self.shuffled}), then in the order scheduled"
        return (
            "the dataset's own order, as scheduled (not shuffled): the guarantee takes that order as random; "
            "use with_anytime_stopping or --sample-shuffle where the dataset is sorted"
        )

    def _reference_note(self) -> dict[str, Any] | None:
        run = self.reference_run
        if run is None:
            return None
        data = Path(run.path).read_bytes() if Path(run.path).is_file() else b""
        return {
            "path": run.path,
            "sha256": hashlib.sha256(data).hexdigest() if data else None,
            "model": run.model,
            "task": self.ref_scores.task if self.ref_scores is not None else None,
        }


def _nearest(name: str, names: list[str]) -> str:

    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def stop_when_known(width: float, alpha: float = 0.05, scorer: str | None = None, low: float = 0.0, high: float = 1.0):
    """A manager that stops once the task's mean score is known within `width` (confidence 1 - alpha)."""
    return AnytimeStopping(StoppingRule("mean", alpha, width=width, low=low, high=high), scorer)


def stop_when_certified(
    reference: str,
    margin: float | None = None,
    alpha: float = 0.05,
    scorer: str | None = None,
    higher_is_better: bool = True,
    low: float = 0.0,
    high: float = 1.0,
):
    """A manager that stops once the paired difference to `reference` (a log of another model on the same
    samples) is certified nonzero, or, with `margin`, within +-margin (a wrong claim: probability <= alpha)."""
    return AnytimeStopping(
        StoppingRule("paired", alpha, margin=margin, low=low, high=high), scorer, reference, higher_is_better
    )


def with_anytime_stopping(task: Task, manager: AnytimeStopping, seed: int = 0) -> Task:
    """`task` with its samples in a seeded random order and `manager` as its early stopping (the task is
    changed in place, as `task_with` does, and returned)."""
    from inspect_ai import task_with
    from inspect_ai.dataset import MemoryDataset

    samples = list(task.dataset)
    random.Random(seed).shuffle(samples)
    dataset = MemoryDataset(samples, name=task.dataset.name, location=task.dataset.location, shuffled=True)
    manager.shuffle_seed = seed
    return task_with(task, dataset=dataset, early_stopping=manager)


__all__ = ["AnytimeStopping", "stop_when_certified", "stop_when_known", "with_anytime_stopping", "UNDECIDED"]
