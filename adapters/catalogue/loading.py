"""Load resolved weights into Hugging Face objects, and write plain HF folders.

Precisions: `bf16` (default; on these CPUs 1.5-3x faster than fp32), `fp32`, and `nf4`
(bitsandbytes 4-bit NF4 with bf16 compute; it runs on CPU with bitsandbytes >= 0.45, slowly).

A GGUF file is dequantised once per precision into a plain HF folder in the cache
(`<cache>/hf/<name>-<sha12>-<precision>`, `GgufConfig(dequantize=True)` so the result does not depend
on whether the optional `kernels` package is installed), and every load after that reads the folder:
the same tensors bit for bit and the same tokenizer, in seconds instead of minutes (transformers
dequantises and converts GGUF tokenizers in Python; measured: Gemma 3 270M 94 s from the GGUF, 3.7 s
from the folder). NF4 loads the bf16 folder with the BitsAndBytesConfig. The recorded weights hash
stays the GGUF's; a folder whose source hash no longer matches, or that fails to load, is written again.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from pathlib import Path

from safetyrepro.adapters.catalogue.model_specs import ENGINE
from safetyrepro.adapters.catalogue.weights import ResolvedModel, cache_dir, resolve_weights
from safetyrepro.atomic import check_output_set, replace_folder, staged_output
from safetyrepro.compat.transformers import quiet_gguf_dequantisation_bar, strip_gguf_quantizer
from safetyrepro.errors import UserError, error_line, one_of

PRECISIONS = ("bf16", "fp32", "nf4")
EXPORT_PRECISIONS = ("bf16", "fp32")
SOURCE_FILE = "safetyrepro_source.json"  # written into exported folders: what they were made from


def check_precision(precision: str) -> str:
    p = str(precision).strip().lower()
    aliases = {"bfloat16": "bf16", "float32": "fp32", "fp-32": "fp32", "4bit": "nf4"}
    p = aliases.get(p, p)
    if p not in PRECISIONS:
        raise one_of("precision", precision, PRECISIONS)
    return p


def resolve_device(device: str | None) -> str:
    import torch

    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    d = str(device).strip().lower()
    if d == "cpu":
        return d
    if d == "cuda" or d.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UserError(f"device {device!r} asked for, but torch sees no CUDA device (torch {torch.__version__})")
        return d
    raise one_of("device", device, ("cpu", "cuda", "cuda:N", "auto"))


def check_loadable(models, device: str | None) -> None:
    """What can be known wrong about model entries without loading one: each engine model's precision
    note and weights (a missing or truncated file, an unknown name), and the device."""
    engine = [m for m in models if m.kind == ENGINE]
    for m in engine:
        if m.precision:
            check_precision(m.precision)
    if engine or device:
        resolve_device(device)
    for m in engine:
        resolve_weights(m.target)


def _torch_dtype(precision: str):
    import torch

    return torch.float32 if precision == "fp32" else torch.bfloat16


def _quiet_transformers():
    """No load chatter (set SAFETYREPRO_VERBOSE_LOAD=1 to see it): transformers' warnings and
    progress bars, including the GGUF dequantisation bar, which uses tqdm directly."""
    if os.environ.get("SAFETYREPRO_VERBOSE_LOAD"):
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    quiet_gguf_dequantisation_bar()


def load_tokenizer(resolved: ResolvedModel):
    from transformers import AutoTokenizer

    _quiet_transformers()
    try:
        if resolved.kind == "gguf":
            return AutoTokenizer.from_pretrained(resolved.path.parent, gguf_file=resolved.path.name)
        return AutoTokenizer.from_pretrained(resolved.path)
    except (OSError, ValueError, KeyError, struct.error) as e:  # struct.error: a truncated GGUF
        raise UserError(f"cannot load a tokenizer from {resolved.path}: {error_line(e, with_type=False)}") from None


def load_hf(resolved: ResolvedModel, precision: str = "bf16", device: str = "cpu"):
    """(model, tokenizer) in eval mode on `device`."""
    precision = check_precision(precision)
    if resolved.kind != "gguf":
        return _load_folder(resolved.path, precision, device)
    folder_precision = "bf16" if precision == "nf4" else precision
    folder = materialised_folder(resolved, folder_precision)
    try:
        return _load_folder(folder, precision, device)
    except UserError:  # a damaged cache folder (a crash mid-copy, a full disk): write it once more
        shutil.rmtree(folder, ignore_errors=True)
        return _load_folder(materialised_folder(resolved, folder_precision), precision, device)


def _load_folder(folder: Path, precision: str, device: str):
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _quiet_transformers()
    kwargs: dict = {"dtype": _torch_dtype(precision)}
    if precision == "nf4":
        kwargs["quantization_config"] = _bnb_config()
        kwargs["device_map"] = {"": device}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, struct.error, SafetensorError) as e:
        why = error_line(e, with_type=False)
        raise UserError(f"cannot load model weights from {folder} ({precision}): {why}") from None
    if precision != "nf4":
        model = model.to(device)  # type: ignore[arg-type]  # transformers' stub misreads .to's decorator
    model.eval()
    return model, tokenizer


def _load_gguf(resolved: ResolvedModel, precision: str):
    """(model, tokenizer) dequantised from a GGUF file: the slow path, taken once per precision."""
    from transformers import AutoModelForCausalLM, GgufConfig

    _quiet_transformers()
    tokenizer = load_tokenizer(resolved)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            resolved.path.parent,
            gguf_file=resolved.path.name,
            dtype=_torch_dtype(precision),
            quantization_config=GgufConfig(dequantize=True),
        )
    except (OSError, ValueError, KeyError, RuntimeError, struct.error) as e:
        why = error_line(e, with_type=False)
        raise UserError(f"cannot load model weights from {resolved.path} ({precision}): {why}") from None
    strip_gguf_quantizer(model)
    return model, tokenizer


def _bnb_config():
    import torch
    from transformers import BitsAndBytesConfig

    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise UserError("precision nf4 needs bitsandbytes: pip install 'safetyrepro[nf4]'") from None
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)


def export_hf_folder(
    resolved: ResolvedModel, out: str | Path, precision: str = "bf16", overwrite: bool = False
) -> Path:
    """Write a plain HF folder (safetensors + tokenizer + chat template) that lm-eval's `hf` model and
    Inspect's `hf/` provider load offline. Returns the folder. A GGUF source is copied from its cached
    folder (written first if need be)."""
    if precision not in EXPORT_PRECISIONS:
        raise one_of("export precision", precision, EXPORT_PRECISIONS)
    out = Path(out).expanduser()
    if out.is_symlink():  # the folder is replaced whole: a link would be replaced, or worse, emptied through
        raise UserError(f"--out {out} is a symbolic link; give the folder itself (the export replaces it whole)")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    if out.exists() and any(out.iterdir()) and not overwrite:
        if (out / SOURCE_FILE).is_file():
            raise UserError(f"{out} already holds an exported model; pass --overwrite to replace it")
        raise UserError(f"output folder {out} exists and is not empty")

    check_output_set(out, EXPORT_COMMAND, legacy=_legacy_export)  # before the model loads
    if resolved.kind == "gguf":
        cached = materialised_folder(resolved, precision)
        write = lambda tmp: shutil.copytree(cached, tmp, dirs_exist_ok=True)  # noqa: E731
    else:
        model, tokenizer = _load_folder(resolved.path, precision, "cpu")
        write = lambda tmp: _save(model, tokenizer, resolved, precision, tmp)  # noqa: E731
    # built whole beside `out`, then swapped in at once: `out` holds the earlier export or this one
    with staged_output(out, EXPORT_COMMAND, legacy=_legacy_export) as stage:
        write(stage)
    return out


EXPORT_COMMAND = "models export"


def _legacy_export(folder: Path, files: list[str]) -> set[str] | None:
    """An export written before folders carried a marker: its files (a flat HF folder) beside SOURCE_FILE."""
    return {f for f in files if "/" not in f} if SOURCE_FILE in files else None


def _save(model, tokenizer, resolved: ResolvedModel, precision: str, folder: Path) -> None:
    import torch

    with torch.no_grad():
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / SOURCE_FILE).write_text(
        json.dumps(
            {
                "label": resolved.label,
                "kind": resolved.kind,
                "source": str(resolved.path),
                "source_sha256": resolved.weights_sha256(),
                "precision": precision,
            },
            indent=1,
        )
    )


def _holds(folder: Path, sha: str) -> bool:
    try:
        return json.loads((folder / SOURCE_FILE).read_text()).get("source_sha256") == sha
    except (OSError, ValueError):
        return False


def materialised_folder(resolved: ResolvedModel, precision: str = "bf16") -> Path:
    """The cached plain HF folder of a GGUF source (written once, reused while the source hash matches).
    Processes that write it at the same time each build their own copy; the first one in place is kept."""
    sha = resolved.weights_sha256()
    name = resolved.spec.label if resolved.spec else resolved.path.stem
    folder = cache_dir() / "hf" / f"{name}-{sha[:12]}-{precision}"
    if _holds(folder, sha):
        return folder
    sys.stderr.write(
        f"safetyrepro: writing a plain {precision} HF folder for {resolved.label} into {folder} "
        "(once; later loads read it)\n"
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    model, tokenizer = _load_gguf(resolved, precision)

    def write(tmp: Path) -> None:
        try:
            _save(model, tokenizer, resolved, precision, tmp)
        except OSError as e:
            raise UserError(
                f"cannot write the cached HF folder for {resolved.label} under {folder.parent}: "
                f"{e.strerror or e} (free space there, or point SAFETYREPRO_CACHE_DIR elsewhere)"
            ) from None

    return replace_folder(folder, write, keep=lambda f: _holds(f, sha))
