"""The anchor configuration of the cross-package study, and the model folder every package loads.

The paper's anchor: Qwen2.5-7B-Instruct, bf16, greedy (T=0, top_p=1), max_new_tokens 96, 0-shot,
300 items, seed 42. Each package is asked for exactly that through its own knobs; what it then
actually executes is read back from its logs and specs (Table 8), not assumed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from safetyrepro.adapters.catalogue.loading import materialised_folder
from safetyrepro.adapters.catalogue.weights import resolve_weights
from safetyrepro.errors import UserError

BENCHMARKS = ("truthfulqa", "bbq", "toxigen")
PACKAGES = ("lm-eval", "helm", "inspect")
# which native task each package has for a benchmark (the paper's coverage: lm-eval has no BBQ in
# 0.4.5 but 0.4.13 ships `bbq`; HELM-lite and inspect_evals have no ToxiGen classification task)
NATIVE_TASKS: dict[str, dict[str, str]] = {
    "lm-eval": {"truthfulqa": "truthfulqa_mc1", "bbq": "bbq", "toxigen": "toxigen"},
    "helm": {
        "truthfulqa": "truthful_qa:task=mc_single,method=multiple_choice_joint",
        "bbq": "bbq:subject=all,method=multiple_choice_joint",
    },
    "inspect": {"truthfulqa": "inspect_evals/truthfulqa (target=mc1)", "bbq": "inspect_evals/bbq"},
}


@dataclass(frozen=True)
class Anchor:
    """The nominal configuration, as the paper states it."""

    model: str = "smollm2"
    precision: str = "bf16"
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 96
    shots: int = 0
    limit: int = 300
    seed: int = 42
    benchmarks: tuple[str, ...] = ("truthfulqa", "bbq", "toxigen")
    device: str = "auto"
    extra: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return asdict(self)

    def covered(self, package: str) -> list[str]:
        return [b for b in self.benchmarks if b in NATIVE_TASKS[package]]


def check_benchmarks(names) -> tuple[str, ...]:
    out = []
    for n in names:
        if n not in BENCHMARKS:
            raise UserError(f"unknown benchmark {n!r} for crosspkg; allowed: {', '.join(BENCHMARKS)}")
        out.append(n)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class ModelFolder:
    """A plain Hugging Face folder of the anchor model, loadable by all three packages offline."""

    label: str
    path: Path
    weights_sha256: str
    has_chat_template: bool
    max_length: int
    num_parameters: int | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


def model_folder(model: str, precision: str = "bf16") -> ModelFolder:
    """The anchor model as a plain HF folder: an existing folder is used as it is; an embedded label
    or a GGUF file is exported once into SafetyRepro's cache (adapters.loading.materialised_folder)."""
    if precision not in ("bf16", "fp32"):
        raise UserError(f"crosspkg runs the anchor in bf16 (or fp32), not {precision!r}")
    resolved = resolve_weights(model)
    folder = resolved.path if resolved.kind == "hf" else materialised_folder(resolved, precision)
    cfg = json.loads((folder / "config.json").read_text())
    text_cfg = cfg.get("text_config") or cfg
    max_len = next(
        (int(text_cfg[k]) for k in ("max_position_embeddings", "n_positions", "n_ctx") if k in text_cfg), 2048
    )
    has_chat = (folder / "chat_template.jinja").is_file() or "chat_template" in json.loads(
        (folder / "tokenizer_config.json").read_text() if (folder / "tokenizer_config.json").is_file() else "{}"
    )
    return ModelFolder(
        label=resolved.label,
        path=Path(folder),
        weights_sha256=resolved.weights_sha256(),
        has_chat_template=bool(has_chat),
        max_length=max_len,
    )


def offline_env() -> dict[str, str]:
    """The environment every package runs under here: no hub, no telemetry."""
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "INSPECT_TELEMETRY": "0",
        }
    )
    return env
