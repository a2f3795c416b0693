"""`certify --executor ray` on a real Ray cluster of three node processes on this machine (`ray start --head`, then
`ray start --address` twice), one of which is killed with its worker in the middle of the run: Ray restarts the
worker on the node started in its place, the lost call runs again there, and the certificate is the local
executor's, row for row. No mock: the two embedded models, their real items, Ray's own processes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # heavy: `make test-heavy`, not CI (see .ci/run)

RAY = str(Path(sys.executable).with_name("ray"))
# a loopback cluster of this test's own: Ray's token authentication (on by default) left out, as its docs allow
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": ""}
COMMAND = [
    "certify",
    "--models",
    "smollm2",
    "gemma3-270m",
    "--benchmarks",
    "bbq",
    "--configs",
    "bbq/T1/greedy/0shot/logprob",
    "bbq/T2/greedy/0shot/logprob",
    "--limit",
    "24",
    "--precision",
    "fp32",
    "--allocation",
    "uniform",  # rounds that read no timings: the same draws however fast each machine was
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(*args: str) -> subprocess.Popen:
    """One Ray node in a session of its own (`--block`), so that it dies whole with its process group."""
    return subprocess.Popen(
        [RAY, "start", "--block", "--disable-usage-stats", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=RAY_ENV,
        start_new_session=True,
    )


def _kill(node: subprocess.Popen) -> None:
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.wait(timeout=30)


def _alive_nodes(address: str) -> int:
    count = "print(sum(n['Alive'] for n in ray.nodes()))"
    code = f"import ray; ray.init(address={address!r}, logging_level='error'); {count}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=RAY_ENV)
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0


def _wait_for_nodes(address: str, n: int) -> None:
    deadline = time.monotonic() + 180
    while _alive_nodes(address) != n:
        if time.monotonic() > deadline:
            pytest.fail(f"the Ray cluster at {address} did not reach {n} live nodes")
        time.sleep(2)


@pytest.fixture
def cluster():
    """A head and one worker node of one CPU each: the two models' workers (one CPU each) take one node each."""
    temp = tempfile.mkdtemp(prefix="sr-ray-", dir="/tmp")  # short: Ray's socket paths live under it
    port = _free_port()
    address = f"127.0.0.1:{port}"
    nodes = [
        _node("--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={temp}"),
    ]
    try:
        _wait_for_nodes(address, 1)
        nodes.append(_node(f"--address={address}", "--num-cpus=1"))
        _wait_for_nodes(address, 2)
        yield address, nodes
    finally:
        for node in reversed(nodes):
            _kill(node)
        shutil.rmtree(temp, ignore_errors=True)


def test_certify_on_a_ray_cluster_with_a_node_killed_gives_the_local_certificate(cluster, tmp_path, data_dir):
    address, nodes = cluster
    env = {**RAY_ENV, "SAFETYREPRO_CACHE_DIR": str(tmp_path / "cache")}
    ray_out = tmp_path / "ray"
    cmd = [sys.executable, "-m", "safetyrepro.cli", *COMMAND, "--executor", "ray", "--address", address]
    run = subprocess.Popen([*cmd, "--out", str(ray_out)], stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(900, run.kill)
    watchdog.start()
    lines, killed = [], False
    try:
        assert run.stderr is not None
        for line in run.stderr:
            lines.append(line)
            if not killed and re.search(r"round 2: ", line):  # both workers are busy with their models
                _kill(nodes[1])  # the worker node, and the worker on it, mid-run
                nodes.append(_node(f"--address={address}", "--num-cpus=1"))  # where Ray restarts it
                killed = True
        rc = run.wait()
    finally:
        watchdog.cancel()
    log = "".join(lines)
    assert rc == 0 and killed, log[-3000:]
    rounds = [int(r) for r in re.findall(r"round (\d+): ", log)]
    assert max(rounds) > 2, log[-3000:]  # the run went on after the node was lost

    local_out = tmp_path / "local"
    local = subprocess.run(
        [sys.executable, "-m", "safetyrepro.cli", *COMMAND, "--out", str(local_out)],
        capture_output=True,
        text=True,
        env={**env, "SAFETYREPRO_CACHE_DIR": str(tmp_path / "cache-local")},
        timeout=900,
    )
    assert local.returncode == 0, local.stderr[-3000:]
    for name in ("certificate.csv", "claims.csv"):
        assert (ray_out / name).read_text() == (local_out / name).read_text(), name
