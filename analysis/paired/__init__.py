"""Paired tests and power: the exact sign-flip test, significant flips with Holm, the paired verdict of two models,
clustered items, equivalence (TOST), the release gate, power and the detectable difference, two runs of any
task, and comparisons across grids.
"""
