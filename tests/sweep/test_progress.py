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
    assert re.fullmatch(r"\[1/3\] smollm2 xstest/T1/greedy/0shot/free_form: done in 1 s \(24 item answers\); "
                        r"time left about 1 s \(mean of 1 cells so far\)", done)
    assert lines[-1].startswith("[2/3] smollm2 xstest/T2/greedy/0shot/free_form: failed in 0 s")


def test_durations_read_as_people_say_them():
    assert (duration(12), duration(270), duration(8280)) == ("12 s", "4.5 min", "2.3 h")
