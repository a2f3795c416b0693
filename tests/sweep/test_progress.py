"""A sweep's progress in a log: a line per cell with its seconds and the time left, and a line at
least every heartbeat inside a long cell."""

from __future__ import annotations

import io
import re
import time

from safetyrepro.sweep.progress import SweepProgress, duration


def test_log_lines_per_cell_with_seconds_time_left_and_a_heartbeat():
    out = io.StringIO()
    p = SweepProgress(enabled=True, heartbeat_s=0.2, stream=out)  # a StringIO is no terminal: log lines
    p.start(total=3, done=0)
    p.describe("smollm2 xstest/T1/greedy/0shot/free_form")
    time.sleep(0.65)
    p.advance(24)
    p.describe("smollm2 xstest/T2/greedy/0shot/free_form")
    p.advance(24, failed=True)
    p.stop()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[0/3] smollm2 xstest/T1/greedy/0shot/free_form: started"
    beats = [x for x in lines if "still running" in x]
    assert 2 <= len(beats) <= 4 and all(x.startswith("[0/3] smollm2 xstest/T1/") for x in beats)
    done = next(x for x in lines if ": done in " in x)
    assert re.fullmatch(
        r"\[1/3\] smollm2 xstest/T1/greedy/0shot/free_form: done in 1 s \(24 item answers\); "
        r"time left about 1 s \(mean of 1 cells so far\)",
        done,
    )
    assert lines[-1].startswith("[2/3] smollm2 xstest/T2/greedy/0shot/free_form: failed in 0 s")


def test_durations_read_as_people_say_them():
    assert (duration(12), duration(270), duration(8280)) == ("12 s", "4.5 min", "2.3 h")


def _clock(step: float):
    t = [0.0]

    def now() -> float:
        t[0] += step
        return t[0]

    return now


def test_a_slow_loop_of_inputs_says_how_far_it_is_and_the_time_left():
    from safetyrepro.console import paced

    out = io.StringIO()
    # each item takes 4 s on this clock (every reading of it moves it on 4 s): the first line once 10 s have
    # passed since the start (after item 3, at 12 s: 4 s per item x 7 left = 28 s), then at least 10 s apart
    got = list(paced(list(range(10)), "Inspect logs", prefix="import", stream=out, clock=_clock(4.0)))
    assert got == list(range(10))
    assert out.getvalue().splitlines() == [
        "import: 3 of 10 Inspect logs in 12 s, about 28 s left",
        "import: 6 of 10 Inspect logs in 24 s, about 16 s left",
        "import: 9 of 10 Inspect logs in 36 s, about 4 s left",
        "import: all 10 Inspect logs in 44 s",
    ]


def test_a_quick_loop_of_inputs_prints_nothing():
    from safetyrepro.console import paced

    out = io.StringIO()
    assert list(paced(["a", "b", "c"], "files", prefix="import", stream=out, clock=_clock(0.5))) == ["a", "b", "c"]
    assert out.getvalue() == ""


def test_certify_calls_say_their_place_in_the_round_and_the_budget_left():
    from safetyrepro.certify.live_oracle import _round_note

    # the third part is the model work (CPU seconds) left in a time budget when the call starts
    assert _round_note(None) == ""
    assert _round_note((3, 12, None)) == "; call 3 of 12 of the round"
    assert _round_note((3, 12, 7200.0)) == "; call 3 of 12 of the round, 2.0 h of model work left in the budget"
    assert _round_note((1, 2, -400.0)) == "; call 1 of 2 of the round, 0 s of model work left in the budget"
