"""What SafetyRepro relies on in HELM (crfm-helm, tested window: the `helm` extra in pyproject.toml,
docs/compat.md), and nowhere else.

HELM runs in its own virtual environment and is driven through its `helm-run` / `helm-summarize`
commands; the plugin (crosspkg/helm_plugin) imports only HELM's public modules (clients, run specs,
scenarios, metrics). What is not public is the on-disk layout that HELM's scenarios read their data
from before they would download it, which the offline cross-package study fills from the local
mirror: those paths are here.
"""

from __future__ import annotations

from pathlib import Path

# Where HELM 0.5's `ensure_file_downloaded` looks under <benchmark_output>/scenarios/ (a file there is
# used as it is, nothing is downloaded).
TRUTHFULQA_CSV = Path("truthful_qa") / "data" / "TruthfulQA.csv"  # TruthfulQA v1
BBQ_DATA_DIR = Path("bbq") / "data"  # one JSON-lines file per category, named without a suffix


def scenario_data_path(benchmark_output: Path, relative: Path) -> Path:
    """A path under HELM's scenario data folder of one benchmark_output directory."""
    return Path(benchmark_output) / "scenarios" / relative
