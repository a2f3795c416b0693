"""A real local server: llama.cpp (llama-cpp-python's OpenAI-compatible server) serving the embedded
SmolLM2 GGUF on a free loopback port, swept through Inspect's `openai-api` provider and through
lm-eval's `local-completions` model: free-form cells run; logprob cells are recorded as not applicable
(Inspect's providers give no continuation log-likelihoods; this server's echoed prompt log-probabilities
are one token late, which the sweep finds with one probe before it starts). No mock server. Needs
the `llamacpp` extra (`make llamacpp`), which CI installs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llamacpp_server(tmp_path_factory):
    """`python -m llama_cpp.server` on 127.0.0.1:<free port> with SmolLM2's GGUF, as the README starts it."""
    pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed (make llamacpp)")
    from safetyrepro.adapters.catalogue.weights import resolve_weights

    gguf = resolve_weights("smollm2").path
    port = _free_port()
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--model_alias",
        "smol",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "4096",
        "--logits_all",
        "true",
        "--n_threads",
        "2",
    ]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"llama.cpp server did not start: {log.read_text()[-2000:]}")
            time.sleep(1)
        # One completion before any sweep: a server that dies on its first request (a llama.cpp build whose
        # AMX kernels segfault, as `make llamacpp` now avoids) fails here in seconds, not after a sweep's retries.
        body = json.dumps({"model": "smol", "prompt": "Hello", "max_tokens": 2}).encode()
        req = urllib.request.Request(f"{url}/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                assert r.status == 200
        except OSError as e:
            time.sleep(1)
            status = f"({e!r}, exit {proc.poll()})"
            pytest.fail(f"llama.cpp server failed its first completion {status}: {log.read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _sweep(out: Path, models: list[str], env: dict, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "safetyrepro.cli",
        "sweep",
        "--models",
        *models,
        "--benchmarks",
        "xstest",
        "--tier",
        "conservative_core",
        "--limit",
        "4",
        "--no-progress",
        *extra,
        "--out",
        str(out),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def test_inspect_openai_api_provider_on_the_server(llamacpp_server, tmp_path, data_dir):
    env = {
        **os.environ,
        "LLAMACPP_BASE_URL": llamacpp_server,
        "LLAMACPP_API_KEY": "local",
        "SAFETYREPRO_CACHE_DIR": str(tmp_path / "cache"),
    }
    api = "inspect:openai-api/llamacpp/smol"
    out = tmp_path / "inspect"
    res = _sweep(out, ["smollm2", api], env, "--package", "inspect")
    assert res.returncode == 0, res.stderr[-3000:]
    grid = pd.read_csv(out / "grid.csv")
    assert len(grid) == 8  # 2 models x 4 conservative-core configurations
    mine = grid[grid["model"] == api].set_index("scoring")
    assert (mine.loc["free_form", "status"] == "ok").all() and (mine.loc["logprob", "status"] == "not_applicable").all()
    assert mine.loc["logprob", "score"].isna().all() and (grid[grid["model"] == "smollm2"]["status"] == "ok").all()
    assert "2 logprob cells are not applicable" in res.stdout or "not applicable" in res.stdout
    run = json.loads((out / "run.json").read_text())
    model = next(m for m in run["models"] if m["label"] == api)
    assert model["backend"]["extra"]["base_url"] == llamacpp_server
    assert not model["capabilities"]["loglikelihood"]
    again = _sweep(out, ["smollm2", api], env, "--package", "inspect")
    assert again.returncode == 0 and "no model work" in again.stdout
    analysis = subprocess.run(
        [
            sys.executable,
            "-m",
            "safetyrepro.cli",
            "analyze",
            str(out / "grid.csv"),
            "--out",
            str(tmp_path / "analysis"),
            "--no-figures",
            "--bootstrap",
            "50",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert analysis.returncode == 0, analysis.stderr[-3000:]
    assert (tmp_path / "analysis" / "rho_flip.csv").is_file()


def test_lm_eval_local_completions_on_the_server(llamacpp_server, tmp_path, smollm2_hf_folder, data_dir):
    """Free-form cells through lm-eval's completions client; the server's echoed prompt log-probabilities
    are probed before the sweep starts, found one token late (llama-cpp-python 0.3.36), and its logprob
    cells recorded as not applicable with that reason, rather than scored wrongly."""
    from safetyrepro.adapters.catalogue.model_specs import probe_prompt_logprobs

    ok, why = probe_prompt_logprobs(f"{llamacpp_server}/completions", "smol")
    assert not ok and "one token late" in why
    env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(tmp_path / "cache")}
    spec = (
        f"lm-eval:local-completions:base_url={llamacpp_server}/completions,model=smol,"
        f"tokenizer={smollm2_hf_folder},tokenizer_backend=huggingface,tokenized_requests=False"
    )
    out = tmp_path / "lm-eval"
    res = _sweep(out, [spec], env)
    assert res.returncode == 0, res.stderr[-3000:]
    grid = pd.read_csv(out / "grid.csv").set_index("scoring")
    assert (grid.loc["free_form", "status"] == "ok").all() and grid.loc["free_form", "score"].between(0, 1).all()
    assert (grid.loc["logprob", "status"] == "not_applicable").all()
    items = pd.read_parquet(out / "items.parquet")
    assert len(items) == 2 * 4 and items["raw_output"].str.len().gt(0).any()
    run = json.loads((out / "run.json").read_text())
    assert any("one token late" in f for f in run["models"][0]["capability_flags"])
    with pytest.raises(subprocess.CalledProcessError) as err:  # asked for explicitly: refused, nothing written
        subprocess.run(
            [
                sys.executable,
                "-m",
                "safetyrepro.cli",
                "sweep",
                "--models",
                spec,
                "--benchmarks",
                "xstest",
                "--scoring",
                "logprob",
                "--tier",
                "conservative_core",
                "--limit",
                "2",
                "--out",
                str(tmp_path / "refused"),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=600,
        )
    assert err.value.returncode == 2 and "one token late" in err.value.stderr and not (tmp_path / "refused").exists()
