"""Where HELM is, and the working folder a helm-run needs offline (prod_env + scenario data).

HELM (crfm-helm 0.5.16) lives in its own virtual environment (`make helm` builds `.venv-helm`):
pip cannot resolve crfm-helm together with inspect-ai (zstandard pins) and a plain install replaces
the CPU torch. crosspkg drives it through its `helm-run` / `helm-summarize` commands.
Lookup order: $SAFETYREPRO_HELM_VENV, the running interpreter's own bin folder, `.venv-helm` in the
current folder, `.venv-helm` beside this source tree.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.crosspkg.anchor import model_folder, offline_env
from safetyrepro.errors import UserError

HELM_VERSION = "0.5.16"
ENV_VAR = "SAFETYREPRO_HELM_VENV"


def helm_bin(required: bool = True) -> Path | None:
    """The folder holding `helm-run` and `helm-summarize` (and the HELM venv's python)."""
    if os.environ.get(ENV_VAR):
        b = Path(os.environ[ENV_VAR]).expanduser() / "bin"
        if (b / "helm-run").is_file():
            return b
        if required:
            raise UserError(
                f"${ENV_VAR}={os.environ[ENV_VAR]} has no bin/helm-run; run `make helm` or fix the variable"
            )
        return None
    candidates = [Path(sys.executable).parent]
    candidates.append(Path.cwd() / ".venv-helm" / "bin")
    candidates.append(Path(__file__).resolve().parents[1] / ".venv-helm" / "bin")
    for c in candidates:
        if (c / "helm-run").is_file() and (c / "python").exists():
            return c
    if required:
        raise UserError(
            "HELM is not installed: run `make helm` (builds .venv-helm with crfm-helm "
            f"{HELM_VERSION} next to the CPU torch) or set ${ENV_VAR} to a venv that has helm-run"
        )
    return None


def model_name(label: str, sha: str) -> str:
    """One HELM model name per weights: HELM caches loaded models and requests by name."""
    safe = "".join(ch if ch.isalnum() or ch in "-._" else "-" for ch in label.lower())
    return f"safetyrepro/{safe}-{sha[:10]}"


def helm_model_folder(src: Path, dst: Path, max_length: int) -> Path:
    """A folder HELM's HuggingFace client accepts: links to the weights, and a tokenizer config whose
    model_max_length is finite (GGUF-made tokenizers save 1e30, which HELM rejects)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name == "tokenizer_config.json" or not f.is_file():
            continue
        link = dst / f.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f.resolve())
    cfg = json.loads((src / "tokenizer_config.json").read_text()) if (src / "tokenizer_config.json").is_file() else {}
    mml = cfg.get("model_max_length")
    if not isinstance(mml, int) or mml > 10**7:
        cfg["model_max_length"] = int(max_length)

    atomic_write(dst / "tokenizer_config.json", json.dumps(cfg, indent=1))
    return dst


def write_prod_env(
    prod_env: Path,
    name: str,
    folder: Path,
    max_length: int,
    eos_token: str,
    precision: str = "bf16",
    device: str = "cpu",
    extra_deployments: list[dict] | None = None,
) -> dict:
    """prod_env/{model_deployments,tokenizer_configs,model_metadata}.yaml for one local model.

    The default deployment `<name>` keeps HELM's own chat handling (apply_chat_template unset, so
    HuggingFaceClient decides from the tokenizer). It is listed LAST: HELM picks the last deployment
    of a model when a run entry names no deployment."""
    import yaml

    prod_env.mkdir(parents=True, exist_ok=True)
    args = {
        "pretrained_model_name_or_path": str(folder),
        "device": device,
        "torch_dtype": "torch.bfloat16" if precision == "bf16" else "torch.float32",
    }
    deployments = list(extra_deployments or []) + [
        {
            "name": name,
            "model_name": name,
            "tokenizer_name": name,
            "max_sequence_length": int(max_length),
            "client_spec": {"class_name": "helm.clients.huggingface_client.HuggingFaceClient", "args": args},
        }
    ]
    tokenizers = [
        {
            "name": name,
            "tokenizer_spec": {
                "class_name": "helm.tokenizers.huggingface_tokenizer.HuggingFaceTokenizer",
                "args": {"pretrained_model_name_or_path": str(folder)},
            },
            "end_of_text_token": eos_token,
            "prefix_token": "",
        }
    ]
    metadata = [
        {
            "name": name,
            "display_name": name.split("/", 1)[1],
            "description": f"local folder {folder}",
            "creator_organization_name": "SafetyRepro",
            "access": "open",
            "release_date": datetime.date(2024, 1, 1),
            "tags": ["TEXT_MODEL_TAG", "PARTIAL_FUNCTIONALITY_TEXT_MODEL_TAG", "INSTRUCTION_FOLLOWING_MODEL_TAG"],
        }
    ]

    for name_, doc in (
        ("model_deployments.yaml", {"model_deployments": deployments}),
        ("tokenizer_configs.yaml", {"tokenizer_configs": tokenizers}),
        ("model_metadata.yaml", {"models": metadata}),
    ):
        atomic_write(prod_env / name_, yaml.safe_dump(doc, sort_keys=False))
    return {"deployments": deployments, "tokenizers": tokenizers}


def helm_environment(run_dir: Path) -> dict[str, str]:
    """Offline environment for helm-run: no hub, and an empty NLTK punkt_tab so HELM's metric modules
    do not try to download it at import."""
    nltk = run_dir / "nltk_data" / "tokenizers" / "punkt_tab"
    nltk.mkdir(parents=True, exist_ok=True)
    env = offline_env()
    env["NLTK_DATA"] = str(run_dir / "nltk_data")
    env.pop("PYTHONPATH", None)
    return env


def engine_deployment(name: str, folder: Path, max_length: int, precision: str = "bf16", device: str = "cpu") -> dict:
    """A deployment of the same model served by SafetyRepro's engine (the plugin's client)."""
    return {
        "name": f"{name}-engine",
        "model_name": name,
        "tokenizer_name": name,
        "max_sequence_length": int(max_length),
        "client_spec": {
            "class_name": "safetyrepro.crosspkg.helm_plugin.client.SafetyReproEngineClient",
            "args": {"pretrained_model_name_or_path": str(folder), "precision": precision, "device": device},
        },
    }


def write_plugin_env(run_dir: Path, model: str, precision: str = "bf16", device: str = "cpu") -> dict:
    """A helm-run working folder for SafetyRepro's run entries: prod_env with the model under HELM's own
    HuggingFaceClient (`<name>`, chat handling auto) and under SafetyRepro's engine (`<name>-engine`)."""
    from transformers import AutoTokenizer

    # prod_env names the model folder by path and helm-run runs from inside run_dir (`cd` in the README's
    # recipe): a relative path would point nowhere from there. abspath, not resolve: links are not followed
    run_dir = Path(os.path.abspath(run_dir))
    folder = model_folder(model, precision)
    name = model_name(folder.label, folder.weights_sha256)
    hf = helm_model_folder(folder.path, run_dir / "model", folder.max_length)
    eos = AutoTokenizer.from_pretrained(hf).eos_token or ""
    write_prod_env(
        run_dir / "prod_env",
        name,
        hf,
        folder.max_length,
        eos,
        precision,
        device,
        extra_deployments=[engine_deployment(name, folder.path, folder.max_length, precision, device)],
    )
    helm_environment(run_dir)
    return {"model": name, "engine_deployment": f"{name}-engine", "folder": str(folder.path)}
