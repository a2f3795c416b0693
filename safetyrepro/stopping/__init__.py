"""Anytime-valid early stopping for evaluations that are running: the rules (rule.py) and their Inspect
early-stopping manager (inspect_manager.py). `from safetyrepro.stopping import stop_when_known,
stop_when_certified` (docs/compare_any_runs.md)."""

from safetyrepro.sequential.stopping import Decisions, SequentialRule, StoppingRule

from .inspect_manager import AnytimeStopping, stop_when_certified, stop_when_known, with_anytime_stopping

__all__ = [
    "AnytimeStopping",
    "Decisions",
    "SequentialRule",
    "StoppingRule",
    "stop_when_certified",
    "stop_when_known",
    "with_anytime_stopping",
]
