"""Commands that evaluate the five benchmarks' items on demand answer `--task` with the commands that do it
(issue 58: certify live and flow need a sweep of the task first)."""

from __future__ import annotations

import pytest

from safetyrepro.cli import main


@pytest.mark.parametrize("command", [["certify", "live"], ["flow"]])
def test_certify_live_and_flow_point_a_task_to_the_sweep_first(command, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--task", "lm-eval:arc_easy", "--models", "smollm2", "--out", "x"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs only the five benchmarks' tasks" in err
    assert "safetyrepro sweep --task" in err and "certify replay DIR/items.parquet" in err
