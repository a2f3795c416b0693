"""How plan writes its numbers: a difference in points, a share in per cent (the plan pages' one spelling)."""

from __future__ import annotations


def points(e: float) -> str:
    return f"{e * 100:.3g}"


def percent(p: float) -> str:
    return f"{p * 100:g} %"
