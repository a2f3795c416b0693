"""Every command of the lm-eval and Inspect sections of docs/lm_eval_and_inspect.md (moved there from
the README), run as written (DIR is an exported SmolLM2 folder), prints the score that `safetyrepro
sweep` gives for the same configuration and model: a documented example cannot mislead. The commands
are read from that page itself, so an edit to it is tested as it stands."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # heavy: `make test-heavy`, not CI (see .ci/run)

README = Path(__file__).resolve().parent.parent / "docs" / "lm_eval_and_inspect.md"  # the README links it
BIN = Path(sys.executable).parent


def section_commands(heading: str) -> list[str]:
    text = README.read_text()
    body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", body, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def lm_eval_config(argv: list[str]) -> dict:
    task = argv[argv.index("--tasks") + 1]
    m = re.fullmatch(r"safetyrepro_(\w+?)_t(\d)(_gen)?", task)
    args = {k: argv[i + 1] for i, k in enumerate(argv) if k.startswith("--") and i + 1 < len(argv)}
    model_args = dict(p.split("=", 1) for p in args["--model_args"].split(","))
    model = f"lm-eval:hf:pretrained={model_args['pretrained']}" if args["--model"] == "hf" else model_args["model"]
    return {
        "model": model,
        "benchmark": m.group(1),
        "template": f"T{m.group(2)}",
        "scoring": "free_form" if m.group(3) else "logprob",
        "shots": int(args.get("--num_fewshot", 0)),
        "decoding": "greedy",
        "seed": None,
        "limit": int(args["--limit"]),
        "package": "lm-eval",
    }


def inspect_config(argv: list[str]) -> dict:
    t = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-T")
    args = {k: argv[i + 1] for i, k in enumerate(argv) if k.startswith("--") and i + 1 < len(argv)}
    benchmark = argv[argv.index("eval") + 1].split("/")[1]
    temperature = float(args.get("--temperature", 0))
    decoding = "greedy" if temperature == 0 else {0.3: "moderate", 0.7: "diverse"}[temperature]
    defaults = {"xstest": "free_form"}
    return {
        "model": args["--model"].split("/", 1)[1],
        "benchmark": benchmark,
        "template": t.get("template", "T1"),
        "scoring": t.get("scoring", defaults.get(benchmark, "logprob")),
        "shots": int(t.get("shots", 0)),
        "decoding": decoding,
        "seed": args.get("--seed"),
        "limit": int(args["--limit"]),
        "package": "inspect",
    }


def lm_eval_score(stdout: str, task: str) -> float:
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == task and "acc" in cells:
            return float(cells[cells.index("acc") + 2])
    raise AssertionError(f"no acc row for {task} in:\n{stdout[-2000:]}")


def inspect_score(log_dir: Path) -> float:
    from inspect_ai.log import list_eval_logs, read_eval_log

    log = read_eval_log(list_eval_logs(str(log_dir))[0])
    return float(log.results.scores[0].metrics["accuracy"].value)


def config_id(cfg: dict) -> str:
    return f"{cfg['benchmark']}/{cfg['template']}/{cfg['decoding']}/{cfg['shots']}shot/{cfg['scoring']}"


def sweep_grid(group: tuple, cfgs: list[dict], tmp: Path, env: dict) -> pd.DataFrame:
    """One sweep of every documented configuration of one model and package (`--configs`), from an empty
    outputs cache of its own: the cells are independent, so each scores as it would alone, and the model
    is loaded once per model instead of once per command."""
    from safetyrepro.adapters.catalogue.weights import cache_sharing_models

    model, package, limit = group
    name = f"{abs(hash(group))}"
    out = tmp / f"sweep-{name}"
    cmd = [
        str(BIN / "safetyrepro"),
        "sweep",
        "--models",
        model,
        "--configs",
        *sorted({config_id(c) for c in cfgs}),
        "--limit",
        str(limit),
        "--package",
        package,
        "--no-progress",
        "--out",
        str(out),
    ]
    res = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=3000,
        env={**env, "SAFETYREPRO_CACHE_DIR": str(cache_sharing_models(tmp / f"cache-{name}"))},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return pd.read_csv(out / "grid.csv")


def swept_score(grid: pd.DataFrame, cfg: dict) -> float:
    (row,) = grid[grid["config_id"] == config_id(cfg)].itertuples()
    if cfg["seed"] is not None:
        return float(json.loads(row.seed_scores)[cfg["seed"]])
    return float(row.score)


def run_command(command: str, n: int, folder: Path, tmp_path: Path, env: dict) -> float:
    """Run one documented command as written; the score it printed (or logged)."""
    argv = shlex.split(command.replace("DIR", str(folder)))
    if argv[0] == "lm_eval":
        res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3000)
        assert res.returncode == 0, res.stderr[-3000:]
        assert "has a chat template but lm-eval sent plain text" not in res.stderr  # the page's flags match
        return lm_eval_score(res.stdout, argv[argv.index("--tasks") + 1])
    logs = tmp_path / f"inspect-{n}"
    res = subprocess.run(argv, capture_output=True, text=True, env={**env, "INSPECT_LOG_DIR": str(logs)}, timeout=3000)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return inspect_score(logs)


def test_readme_commands_print_the_sweeps_scores(tmp_path, data_dir):
    env = {**os.environ, "TQDM_DISABLE": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    folder = tmp_path / "DIR"
    commands = section_commands("lm-eval") + section_commands("Inspect")
    assert len(commands) >= 6
    runnable = []
    for command in commands:
        argv = shlex.split(command.replace("DIR", str(folder)))
        if argv[:2] == ["inspect", "view"]:
            continue
        if argv[0] == "safetyrepro":  # models export: makes DIR for the commands after it
            res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
            assert res.returncode == 0 and (folder / "config.json").is_file(), res.stderr[-2000:]
            continue
        cfg = lm_eval_config(argv) if argv[0] == "lm_eval" else inspect_config(argv)
        runnable.append((command, cfg))
    groups: dict[tuple, list[dict]] = {}
    for _, cfg in runnable:
        groups.setdefault((cfg["model"], cfg["package"], cfg["limit"]), []).append(cfg)
    # two at a time, one torch thread each: much of each command is single-threaded start-up (imports, task
    # building, model load), and two processes of two OpenMP threads on two cores slow each other down; the
    # documented commands and the sweeps share one pool, so neither core waits for the other's kind of job
    env = {**env, "OMP_NUM_THREADS": "1"}
    with ThreadPoolExecutor(max_workers=2) as pool:
        grids = {g: pool.submit(sweep_grid, g, cfgs, tmp_path, env) for g, cfgs in groups.items()}
        printed = [pool.submit(run_command, c, n, folder, tmp_path, env) for n, (c, _) in enumerate(runnable)]
        checked = []
        for (command, cfg), got in zip(runnable, printed, strict=True):
            p = got.result()
            swept = swept_score(grids[(cfg["model"], cfg["package"], cfg["limit"])].result(), cfg)
            assert abs(p - swept) < 5e-5, (command, p, swept)  # lm-eval prints 4 decimals
            checked.append(f"{command}\n    printed {p:.4f}, sweep {swept:.4f}")
    print("\n" + "\n".join(checked))
    assert len(checked) >= 6
