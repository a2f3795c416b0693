"""The paper's metrics and their companions, pure functions over a validated grid: rho_flip and its chance
reference, orderings, slices, dispersion (SDI, CFR), variance attribution (ANOVA), SHAP axis attribution, the
configuration bootstrap, the verdict certificate, degenerate cells and the form and content readings.
"""
