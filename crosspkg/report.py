"""report.md: the anchor, Table 7, Table 8, the agreement check and the decomposition."""

from __future__ import annotations

from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.crosspkg.tables import table7_markdown, table8_markdown

CAVEATS = """\
- Scores are non-equivalent measurands: each package scores a different candidate object under its own
  boilerplate and chat handling (Table 8). The range column is reported with that caveat, over the
  package-default stacks only.
- Data: every package reads the local mirror. BBQ has 9 of 11 categories (Race_x_SES and Race_x_gender absent;
  Gender_identity, Race_ethnicity and SES only rows 300-1199), so lm-eval's `All` and HELM's `subject=all` pools
  are not the published ones; HELM's test draw comes from this smaller pool. HELM reads TruthfulQA v1 (its pinned
  file), lm-eval and Inspect read v0 (the HF dataset).
- inspect_evals is not installed (its loaders read the hub): its truthfulqa and bbq task definitions (0.28.0) are
  reproduced on the mirror's records, with Inspect's own dataset shuffling, multiple_choice solver and choice scorer.
- Inspect's `hf/` provider samples by default (do_sample=True; temperature 0 is rejected by transformers), so its
  package-default row is sampled with the anchor's seed; `inspect-greedy` is the same stack with the provider's
  `do_sample=False` model arg, and is the Inspect endpoint of the decomposition.
"""


def _pp(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def write_report(out: Path, anchor, t7, t8, decomposition, run) -> Path:
    lines = [
        "# Cross-package anchor study",
        "",
        f"Model `{anchor.model}`, {anchor.precision}, greedy (T={anchor.temperature}, top_p={anchor.top_p}), "
        f"max_new_tokens {anchor.max_new_tokens}, {anchor.shots}-shot, limit {anchor.limit} items, seed {anchor.seed}.",
        "",
        f"Wall time: native runs {run['wall_s']['native']:.0f} s, emulation and decomposition "
        f"{run['wall_s']['emulate']:.0f} s, total {run['wall_s']['total']:.0f} s. Per stack (first run): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in run.get("stack_wall_s", {}).items() if v),
        "",
        "## Table 7: score per package at the anchor (accuracy, %)",
        "",
        table7_markdown(t7),
        "",
        "## Table 8: what differs between the stacks (generated from what each package ran)",
        "",
        table8_markdown(t8),
        "",
        "## Caveats",
        "",
        CAVEATS,
    ]
    if decomposition:
        lim = decomposition.get("limit")
        lines += [
            "## Emulated endpoints against the real packages (per-item agreement)",
            "",
            "Agreement on every item of each stack; "
            + (
                f"the decomposition walks on the first {lim} items of each stack (`--decompose-limit`)."
                if lim
                else "the decomposition walks on all of them."
            ),
            "",
            "| benchmark | endpoint | real run | items | same choice | agreement | identical prompt | "
            "real score | emulated score |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for b, r in decomposition["benchmarks"].items():
            for s, c in r["checks"].items():
                lines.append(
                    f"| {b} | {s} | {c['real_stack']} | {c['n']} | {c['agree']} | {_pp(c['agreement'])} % | "
                    f"{_pp(c['prompt_identical'])} % | {_pp(c['real_score'])} | {_pp(c['emulated_score'])} |"
                )
        lines += [
            "",
            "The real prompt of lm-eval is its logged context; of Inspect, its logged messages rendered with the "
            "model's chat template (what its hf provider does); of HELM, its adapter prompt rendered with the chat "
            "template and found verbatim in HELM's request cache for "
            + ", ".join(
                f"{_pp(c.get('real_prompt_verified'))} % ({b})"
                for b, r in decomposition["benchmarks"].items()
                for s, c in r["checks"].items()
                if s == "helm"
            )
            + " of the items.",
            "",
            "## Decomposition (exact Shapley values over the axis switches, pp)",
            "",
        ]
        lines.append((out / "decomposition.md").read_text() if (out / "decomposition.md").is_file() else "")
        for b in decomposition["benchmarks"]:
            if (out / f"waterfall_{b}.png").is_file():
                lines += [f"![{b}](waterfall_{b}.png)", ""]
        lines += ["Disagreement examples (first few per endpoint) are in `decomposition.json` (`checks.*.examples`)."]
    p = out / "report.md"
    atomic_write(p, "\n".join(lines) + "\n", root=out)
    return p
