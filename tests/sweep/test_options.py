"""The sweep's options are built once (SweepOptions.from_args, as each command's Profile takes them) and
checked once, when made: whichever command or code makes them, a SweepOptions that exists is valid."""

from __future__ import annotations

import pytest

from safetyrepro.adapters.catalogue.model_specs import parse_model_spec
from safetyrepro.certify.cli import LIVE
from safetyrepro.cli import build_parser, with_current_spelling
from safetyrepro.errors import UserError
from safetyrepro.flow.cli import FLOW
from safetyrepro.sweep import cli as sweep_cli
from safetyrepro.sweep.options import FLAGS, SWEEP, SweepOptions
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE


def _options(command: str, *argv: str, profile=SWEEP) -> SweepOptions:
    args = build_parser().parse_args(with_current_spelling([command, *argv]))
    return SweepOptions.from_args(args, profile)


def test_every_flag_the_parser_declares_is_one_from_args_reads():
    assert tuple(dest for dest, _ in sweep_cli.FLAGS) == FLAGS


def test_defaults_come_from_the_options_fields_whichever_command_parses_them(tmp_path):
    out = ["--out", str(tmp_path / "o")]
    swept = _options("sweep", "--models", "smollm2", *out)
    certified = _options("certify", "--models", "smollm2", "gemma3-270m", *out, profile=LIVE)
    for o in (swept, certified):
        assert (o.tier, o.package, o.precision, o.workers, o.executor) == ("full", "lm-eval", "bf16", 2, "local")
        assert o.tie_rule == DEFAULT_TIE_RULE and o.progress
    # a replay reads no precision or package group unless asked
    replayed = build_parser().parse_args(["certify", "replay", "i.parquet", "--grid", "g.csv", *out])
    assert (replayed.precision, replayed.package) == (None, None)


def test_flow_takes_the_inspect_package_and_refuses_the_runners_flags(tmp_path):
    spec = ["--models", "smollm2", "--out", str(tmp_path / "s.yaml")]
    assert _options("flow", *spec, profile=FLOW).package == "inspect"
    assert _options("flow", *spec, "--package", "inspect", profile=FLOW).package == "inspect"
    for given, says in (
        (["--package", "lm-eval"], "flow runs the Inspect tasks: --package lm-eval does not apply"),
        (["--workers", "2"], "--workers is a sweep runner's option"),
        (["--no-progress"], "--no-progress is a sweep runner's option"),
    ):
        with pytest.raises(UserError, match=says):
            _options("flow", *spec, *given, profile=FLOW)


def test_options_made_in_code_are_checked_as_the_command_lines_are(tmp_path):
    smol = parse_model_spec("smollm2")
    for kwargs, says in (
        ({"models": ()}, "no model given"),
        ({"workers": 0}, "--workers must be at least 1, got 0"),
        ({"limit": 301, "benchmarks": ("bbq",)}, "--limit 301 is more than the 300 items of the bbq subset"),
        ({"tie_rule": "random"}, "unknown tie rule 'random'"),
        ({"package": "helm"}, "--package 'helm'"),
        ({"models": (smol, smol)}, "model 'smollm2' is listed twice"),
    ):
        with pytest.raises(UserError, match=says):
            SweepOptions(**{"models": (smol,), "out": tmp_path, **kwargs})
    o = SweepOptions(models=(smol,), out=tmp_path, benchmarks=("xstest",), tier="conservative_core")
    assert o.selection.benchmarks == ("xstest",) and len(o.selection.configs) == 4
    assert o.spec().identity()["model_specs"] == ["smollm2"]
