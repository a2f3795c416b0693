"""`safetyrepro flow`: the spec holds the sweep's cells, with the Inspect driver's task arguments,
generate options, seeds and items, in a form Inspect Flow loads; what cannot run on Flow is refused."""

from __future__ import annotations

import pytest
import yaml

from safetyrepro.cli import main

pytest.importorskip("inspect_flow", reason="inspect-flow is not installed (pip install 'safetyrepro[flow]')")

ARGS = [
    "--benchmarks",
    "xstest",
    "--templates",
    "T1",
    "T3",
    "--decodings",
    "greedy",
    "moderate",
    "--shots",
    "0",
    "3",
    "--limit",
    "3",
]


def _write(tmp_path, *extra, models=("inspect:mockllm/model", "smollm2")):
    out = tmp_path / "envelope.yaml"
    assert main(["flow", "--models", *models, *ARGS, *extra, "--out", str(out)]) == 0
    return out


def test_spec_holds_the_sweeps_cells_with_the_drivers_arguments(tmp_path, data_dir, capsys):
    from inspect_ai.model import GenerateConfig
    from inspect_flow.api import load_spec_data

    from safetyrepro.adapters.catalogue.model_specs import parse_model_spec
    from safetyrepro.sweep.drivers import inspect_generate_args, inspect_task_args
    from safetyrepro.sweep.plan import plan_cells, select_configs
    from safetyrepro.tasks.envelope import default_rules
    from safetyrepro.tasks.inspect_tasks import benchmark_task
    from safetyrepro.tasks.subsets import item_set

    out = _write(tmp_path)
    said = capsys.readouterr().out
    data = yaml.safe_load(out.read_text())
    spec = load_spec_data(data)  # Flow's own validation of the file (`flow run` loads it the same way)
    assert spec.log_dir == "logs-envelope" and spec.execution_type == "inproc"

    rules = default_rules()
    models = [parse_model_spec(m) for m in ("inspect:mockllm/model", "smollm2")]
    configs = select_configs(
        rules,
        ["xstest"],
        "full",
        "bf16",
        {"template": ["T1", "T3"], "decoding": ["greedy", "moderate"], "shots": [0, 3]},
    )
    cells = plan_cells(models, configs, rules)
    runnable = [c for c in cells if c.applicable]
    # the provider has no log-likelihoods: its logprob cells are left out (the sweep records them not_applicable)
    assert {c.config.scoring for c in cells if not c.applicable} == {"logprob"}
    assert spec.flow_metadata["safetyrepro"]["not_applicable"] == [c.key for c in cells if not c.applicable]
    expected = [(c, s) for c in runnable for s in c.seeds]
    assert len(spec.tasks) == len(expected) and f"{len(expected)} Inspect tasks" in said
    assert {len(c.seeds) for c in runnable} == {1, len(rules.seeds("moderate"))} and len(rules.seeds("moderate")) == 5

    ids = [it.id for it in item_set("xstest").items[:3]]
    for task, (cell, seed) in zip(spec.tasks, expected):
        cfg = cell.config
        assert task.flow_metadata == {"model": cell.model, "config_id": cfg.config_id, "seed": seed}
        assert task.name == "safetyrepro/xstest" and dict(task.args) == inspect_task_args(cfg, "expected")
        own = benchmark_task("xstest", **inspect_task_args(cfg), check_active=False)
        gen = {k: v for k, v in inspect_generate_args(rules, cfg, seed).items() if v is not None}
        assert task.config == own.config.merge(GenerateConfig(**gen))  # the task's budget and stops, plus the decoding
        assert task.version == own.version and list(task.sample_id) == ids
        sampled = rules.decodings[cfg.decoding].do_sample
        assert (task.config.seed, task.config.top_p is not None) == ((seed, True) if sampled else (None, False))
        if cell.model == "smollm2":
            assert (task.model.name, dict(task.model.model_args)) == ("safetyrepro/smollm2", {"precision": "bf16"})
        else:
            assert task.model.name == "mockllm/model" and not task.model.model_args

    mapping = yaml.safe_load((tmp_path / "envelope.mapping.yaml").read_text())
    assert mapping == {"models": [{"match": "mockllm/model", "label": "inspect:mockllm/model"}]}
    assert "--mapping envelope.mapping.yaml" in spec.flow_metadata["safetyrepro"]["import"]


def test_whole_subsets_name_no_sample_ids_and_engine_args_follow_the_flags(tmp_path, data_dir):
    out = tmp_path / "s.yaml"
    assert (
        main(
            [
                "flow",
                "--models",
                "smollm2",
                "--configs",
                "xstest/T1/greedy/0shot/logprob",
                "--precision",
                "fp32",
                "--device",
                "cpu",
                "--batch-size",
                "4",
                "--tie-rule",
                "first",
                "--log-dir",
                "s3://bucket/logs",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (task,) = yaml.safe_load(out.read_text())["tasks"]
    assert "sample_id" not in task and task["args"]["tie_rule"] == "first" and task["args"]["scoring"] == "logprob"
    assert task["model"] == {
        "name": "safetyrepro/smollm2",
        "model_args": {"precision": "fp32", "device": "cpu", "batch_size": 4},
    }
    assert yaml.safe_load(out.read_text())["log_dir"] == "s3://bucket/logs"
    assert yaml.safe_load((tmp_path / "s.mapping.yaml").read_text()) == {"models": []}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--models", "lm-eval:hf:pretrained=/m"], "run through lm-eval, not Inspect"),
        (["--models", "inspect:nosuchprovider/x"], "no model provider 'nosuchprovider'"),
        (["--models", "inspect:mockllm/model", "--scoring", "logprob"], "logprob scoring needs continuation"),
        (["--models", "smollm2", "--executor", "ray"], "--executor is a sweep runner's option"),
        (["--models", "smollm2", "--package", "lm-eval"], "--package lm-eval does not apply"),
        (["--models", "smollm2", "--limit", "0"], "--limit must be a positive number"),
        (["--models", "smollm2", "--templates", "T9"], "unknown template 'T9'"),
        (
            ["--models", "inspect:mockllm/model", "--configs", "xstest/T1/greedy/0shot/logprob"],
            "no cell can run on Inspect",
        ),
    ],
)
def test_what_flow_cannot_run_is_refused_and_nothing_is_written(tmp_path, data_dir, capsys, args, message):
    out = tmp_path / "f.yaml"
    if "--configs" not in args:
        args = [*args, "--benchmarks", "xstest"]
    assert main(["flow", *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "f.mapping.yaml").exists()


def test_spec_file_name_must_be_yaml(tmp_path, data_dir, capsys):
    assert main(["flow", "--models", "smollm2", "--benchmarks", "xstest", "--out", str(tmp_path / "f.json")]) == 2
    assert "ends in .yaml or .yml" in capsys.readouterr().err
