"""`safetyrepro verdict A B --expect better|not-worse|equivalent`: a release gate on a paired verdict.

Each comparison (a task x metric, or a configuration) is asked two one-sided questions about A's true mean
paired difference E = A - B, read in the better direction (a lower-is-better metric is turned round):
- does the data confirm the expectation (pass)?
  better: A is better (the output's own exact test and Holm: `winner` is A);
  not-worse: E > -M (TOST's lower side at the margin, tost.py);
  equivalent: |E| < M (TOST, the output's p_tost).
- does it confirm the opposite (fail)?
  better: B is better (the output's test and Holm: `winner` is B);
  not-worse: E < -M (B better by more than the margin);
  equivalent: E > M or E < -M (a difference beyond the margin; the smaller one-sided p-value, doubled).
Each question's p-values are Holm-adjusted over the output's own family (every task x metric; a benchmark's
configurations), and a comparison passes or fails at adjusted p <= alpha, else it is inconclusive.

The gate over the comparisons: fail if any comparison fails; pass if every comparison passes (and, compared by
configuration, no configuration named by the inputs is left out for lack of paired records); else
inconclusive. A pass is an intersection-union test (Berger 1982): every comparison must pass at alpha, so the
gate's false-pass rate is at most alpha whatever the number of comparisons; the Holm adjustment only makes
it more conservative. A fail is familywise at alpha within each Holm family.

Exit codes: 0 pass, 1 fail, 3 inconclusive (2 stays a refusal, as for every command)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta, binom

from safetyrepro.analysis.paired.significance import holm
from safetyrepro.analysis.paired.tost import is_binary, tost
from safetyrepro.sequential.confidence_sequence import IidBettingCS

BETTER, NOT_WORSE, EQUIVALENT = "better", "not-worse", "equivalent"
EXPECTATIONS = (BETTER, NOT_WORSE, EQUIVALENT)
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
GAMMA = 0.001  # Berger-Boos: the level of beyond_margin's discordance bound, added to each of its p-values
GATE_COLUMNS = ("gate", "gate_p_pass", "gate_p_fail")  # per comparison: outcome, Holm-adjusted p-values


@dataclass(frozen=True)
class Gate:
    expect: str
    margin: float | None
    alpha: float
    outcome: str  # PASS, FAIL or INCONCLUSIVE
    line: str  # "gate: pass — why"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]


def claim(expect: str, b: str, margin: float | None) -> str:
    """What --expect asks of A, in words: 'better than B', 'not worse than B by more than 0.02', ..."""
    if expect == BETTER:
        return f"better than {b}"
    if expect == NOT_WORSE:
        return f"not worse than {b} by more than {margin:g}"
    return f"within +-{margin:g} of {b}"


def opposite(expect: str, a: str, b: str, margin: float | None) -> str:
    """What a failing comparison confirms, in words."""
    if expect == BETTER:
        return f"{b} is better than {a}"
    if expect == NOT_WORSE:
        return f"{b} is better than {a} by more than {margin:g}"
    return f"{a} and {b} differ by more than {margin:g}"


def beyond_margin(differences, margin: float, alpha: float = 0.05) -> tuple[float, float]:
    """One-sided p-values against "E <= M" (evidence that E > M) and against "E >= -M" (evidence that E < -M),
    E the mean paired difference: the opposite sides of TOST's, at the same margin (TOST's own sides are an
    exact unconditional test; these are Berger and Boos' bounded-nuisance binomial test).
    0/1 scores: exact binomial on the discordant items with the discordance D at its one-sided
    Clopper-Pearson *lower* bound D_l and GAMMA added (Berger and Boos): at E = M the chance a discordant item
    goes to A is (1 + M/D)/2, largest where D is smallest, so D_l bounds it for every D the data allow; where
    D_l <= M no D the data allow puts E beyond M, and p = 1. Other bounded scores: the betting e-process's
    anytime p-values (tost.py's, conservative)."""
    d = np.asarray(differences, dtype=float)
    if len(d) == 0:
        return 1.0, 1.0
    if not is_binary(d):
        cs = IidBettingCS(1, alpha, -1.0, 1.0, extra=(margin, -margin))
        for value in d:
            cs.update([0], [value])
        above = float(min(1.0, np.exp(-cs.log_e_above(margin)[0])))
        below = float(min(1.0, np.exp(-cs.log_e_below(-margin)[0])))
        return above, below
    wins, losses, n = int((d > 0).sum()), int((d < 0).sum()), len(d)
    m = wins + losses
    lower = float(beta.ppf(GAMMA, m, n - m + 1)) if m else 0.0
    if lower <= margin:
        return 1.0, 1.0
    q = (1 + margin / lower) / 2  # the largest chance a discordant item goes to A when E = M (or to B when E = -M)
    above = float(binom.sf(wins - 1, m, q))  # P(W' >= W)
    below = float(binom.sf(losses - 1, m, q))  # the same, from B's side
    return min(1.0, above + GAMMA), min(1.0, below + GAMMA)


def raw_p_values(expect: str, better_differences, margin: float | None, alpha: float) -> tuple[float, float]:
    """(p against the expectation's null, p against its opposite's null) for one comparison, unadjusted, from
    its paired differences read in the better direction. Not for BETTER, which reads the output's test."""
    if margin is None:
        raise ValueError(f"{expect} needs a margin")  # the CLI and the API refuse it earlier, in words
    if expect == NOT_WORSE:
        return tost(better_differences, margin, alpha).p_lower, beyond_margin(better_differences, margin, alpha)[1]
    if expect == EQUIVALENT:
        above, below = beyond_margin(better_differences, margin, alpha)
        return tost(better_differences, margin, alpha).p_value, min(1.0, 2 * min(above, below))
    raise ValueError(f"{expect}: the gate reads the output's own test")


def adjust(p_pass: Sequence[float], p_fail: Sequence[float], alpha: float) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One Holm family's outcomes: each side Holm-adjusted over the family, a failure taking precedence."""
    _, passed = holm(np.asarray(p_pass, dtype=float), alpha)
    _, failed = holm(np.asarray(p_fail, dtype=float), alpha)
    outcomes = [FAIL if f <= alpha else PASS if p <= alpha else INCONCLUSIVE for p, f in zip(passed, failed)]
    return outcomes, passed, failed


def _names(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def decide(
    expect: str,
    margin: float | None,
    alpha: float,
    a: str,
    b: str,
    names: Sequence[str],
    outcomes: Sequence[str],
    family: str,
    left_out: Sequence[str] = (),
    not_readable: Sequence[tuple[str, str]] = (),
) -> Gate:
    """The gate over every comparison, with one line that says why. `family`: the Holm family in words;
    `left_out`: comparisons the inputs named that could not be made (a pass needs them); `not_readable`:
    (name, basis) of passing comparisons whose lead is format-driven or uninformative (readings.py), said on
    a pass's line, as that pass is then about answer format, not about which model is safer."""
    k = len(outcomes)
    what = claim(expect, b, margin)
    failed = [n for n, o in zip(names, outcomes) if o == FAIL]
    open_ = [n for n, o in zip(names, outcomes) if o == INCONCLUSIVE]
    if failed:
        why = (
            f"{opposite(expect, a, b, margin)}, confirmed on {len(failed)} of {k} comparison{'s' * (k != 1)} "
            f"({_names(failed)}; {family} at alpha {alpha:g})"
        )
        return Gate(expect, margin, alpha, FAIL, f"gate: {FAIL} — {why}")
    if open_ or left_out or not k:
        parts = []
        if open_:
            parts.append(
                f"{len(open_)} of {k} comparison{'s' * (k != 1)} confirm{'s' * (len(open_) == 1)} neither that "
                f"{a} is {what} nor the opposite ({_names(open_)})"
            )
        if left_out:
            parts.append(
                f"{len(left_out)} named comparison{'s' * (len(left_out) != 1)} could not be made "
                f"({_names(left_out)}: no paired item records)"
            )
        if not k:
            parts.append("nothing was compared")
        why = "; ".join(parts) + f" ({family} at alpha {alpha:g})"
        return Gate(expect, margin, alpha, INCONCLUSIVE, f"gate: {INCONCLUSIVE} — {why}")
    every = "the one comparison" if k == 1 else f"all {k} comparisons"
    why = f"{a} is {what}, confirmed on {every} ({family} at alpha {alpha:g})"
    for basis in sorted({basis for _, basis in not_readable}):
        hit = [n for n, x in not_readable if x == basis]
        why += (
            f"; the pass rests on {len(hit)} {basis} configuration{'s' * (len(hit) != 1)} ({_names(hit)}): about "
            f"{'answer format' if basis == 'format-driven' else 'a cell that answers one label'}, not which model "
            "is safer"
        )
    return Gate(expect, margin, alpha, PASS, f"gate: {PASS} — {why}")
