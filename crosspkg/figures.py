"""Waterfall figures of the decomposition: from one stack's emulated score to another's, one bar per
axis (its exact Shapley value), with the real packages' scores marked."""

from __future__ import annotations

from pathlib import Path

from safetyrepro.atomic import atomic_write

LABELS = {
    "item_set": "item set",
    "candidate_object": "candidate object",
    "boilerplate": "boilerplate / primer",
    "chat": "chat template",
    "system": "system prompt",
    "normalisation": "answer normalisation",
}


def waterfall(ax, walk: dict, title: str) -> None:
    axes = [a for a in walk["axes"]]
    start = 100 * walk["start"]
    xs, bottoms, heights, colors = [], [], [], []
    level = start
    xs.append(f"{walk['from']}\n(emulated)")
    bottoms.append(0)
    heights.append(start)
    colors.append("#888888")
    for a in axes:
        d = 100 * walk["shapley"][a]
        xs.append(LABELS.get(a, a))
        bottoms.append(level if d >= 0 else level + d)
        heights.append(abs(d))
        colors.append("#2a9d8f" if d >= 0 else "#e76f51")
        level += d
    xs.append(f"{walk['to']}\n(emulated)")
    bottoms.append(0)
    heights.append(level)
    colors.append("#888888")
    pos = range(len(xs))
    ax.bar(pos, heights, bottom=bottoms, color=colors, edgecolor="black", linewidth=0.5)
    for i, a in enumerate(axes, start=1):
        d = 100 * walk["shapley"][a]
        ax.text(i, bottoms[i] + heights[i] + 0.5, f"{d:+.1f}", ha="center", va="bottom", fontsize=8)
    ax.scatter(
        [0, len(xs) - 1],
        [100 * walk["real_from"], 100 * walk["real_to"]],
        marker="D",
        color="black",
        zorder=3,
        label="real package score",
    )
    ax.set_xticks(list(pos))
    ax.set_xticklabels(xs, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, max(100, max(b + h for b, h in zip(bottoms, heights)) + 8))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper right")


def waterfalls(result: dict | None, out: Path) -> list[Path]:
    if not result or not result.get("benchmarks"):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for b, r in result["benchmarks"].items():
        walks = r["walks"]
        if not walks:
            continue
        fig, axs = plt.subplots(1, len(walks), figsize=(5.2 * len(walks), 4.6), squeeze=False)
        for ax, w in zip(axs[0], walks, strict=True):
            waterfall(ax, w, f"{b}: {w['from']} → {w['to']}")
        fig.tight_layout()
        p = out / f"waterfall_{b}.png"

        def save(f, fig=fig) -> None:
            fig.savefig(f, format="png", dpi=120)

        atomic_write(p, save, root=out)
        plt.close(fig)
        paths.append(p)
    return paths
