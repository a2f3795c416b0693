"""`--config SPEC.yaml` (issue 55): a run's flags in a file for sweep, certify live, flow and demo; the command
line overrides it; a recorded sweep.json is a valid spec and round-trips (the published study's, here); a key that
is not one of the command's flags, or a sweep.json recorded under other rules, is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from safetyrepro.certify.cli import LIVE
from safetyrepro.cli import build_parser, main, with_current_spelling
from safetyrepro.flow.cli import FLOW
from safetyrepro.run_spec_cli import expand_config
from safetyrepro.sweep.options import SWEEP, SweepOptions

STUDY = Path(__file__).resolve().parents[2] / "study" / "sweep.json"


def _parse(*argv: str):
    parser = build_parser()
    return parser.parse_args(expand_config(with_current_spelling(list(argv)), parser))


def test_a_recorded_sweep_json_round_trips_through_sweep_config(tmp_path):
    args = _parse("sweep", "--config", str(STUDY), "--out", str(tmp_path / "again"))
    assert SweepOptions.from_args(args, SWEEP).spec().identity() == json.loads(STUDY.read_text())


def test_the_command_line_overrides_the_spec_and_every_command_reads_one(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"models": ["smollm2", "gemma3-270m"], "benchmarks": ["xstest"], "limit": 24}))
    args = _parse("sweep", "--config", str(spec), "--limit", "5", "--out", str(tmp_path / "o"))
    o = SweepOptions.from_args(args, SWEEP)
    assert ([m.label for m in o.models], o.benchmarks, o.limit) == (["smollm2", "gemma3-270m"], ("xstest",), 5)
    spec.write_text(yaml.safe_dump({"models": ["smollm2", "gemma3-270m"], "held_only": True, "tier": "core"}))
    certify = _parse("certify", "live", "--config", str(spec), "--out", str(tmp_path / "c"))
    assert certify.held_only and SweepOptions.from_args(certify, LIVE).tier == "core"
    assert _parse("certify", "--config", str(spec), "--out", str(tmp_path / "c")).certify_mode == "live"  # former
    spec.write_text(yaml.safe_dump({"models": ["smollm2"], "benchmarks": ["bbq"]}))
    flowed = SweepOptions.from_args(_parse("flow", "--config", str(spec), "--out", str(tmp_path / "f.yaml")), FLOW)
    assert ([m.label for m in flowed.models], flowed.benchmarks) == (["smollm2"], ("bbq",))
    assert _parse("demo", "--config", str(spec)).benchmarks == ["bbq"]


@pytest.mark.parametrize(
    "spec, says",
    [
        ({"modles": ["smollm2"]}, "'modles' is not a flag of this command (did you mean '--models'?)"),
        ({"reading": "content"}, "'reading' is not a flag of this command"),  # a replay's flag, not live's
        ({"models": {"a": 1}}, "models is dict; give a value, a list or true/false"),
        (["smollm2"], "a spec is a mapping of flags to values, got list"),
        ({"models": ["smollm2"], "rules_sha256": "0" * 64}, "recorded under rules sha256 000000000000..."),
    ],
)
def test_a_spec_that_is_not_one_is_refused_in_one_line(tmp_path, capsys, spec, says):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["certify", "live", "--config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert says in err and str(path) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_the_demo_is_a_packaged_spec_that_certify_live_reads_as_the_same_question(tmp_path):
    from safetyrepro.demo import DEMO_BATCH, DEMO_BUDGET, DEMO_CONFIGS, DEMO_MODELS, DEMO_PRECISION, DEMO_SPEC

    args = _parse("certify", "live", "--config", str(DEMO_SPEC), "--out", str(tmp_path / "c"))
    assert (tuple(args.models), tuple(args.configs), args.precision) == (DEMO_MODELS, DEMO_CONFIGS, DEMO_PRECISION)
    assert (args.budget, args.batch, str(args.out)) == (DEMO_BUDGET, DEMO_BATCH, str(tmp_path / "c"))  # --out wins
    assert DEMO_MODELS == ("qwen2.5-coder-0.5b", "smollm2") and DEMO_BUDGET == "12m"
