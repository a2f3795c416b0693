"""`safetyrepro certify`: certified pairwise verdicts on a budget (algorithm.py says what is certified)."""
