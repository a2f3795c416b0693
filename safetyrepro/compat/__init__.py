"""The one door to other packages' internals: every private import of, and every patch to,
lm-eval, Inspect, HELM and transformers lives in the module of this package named after it, and
nowhere else (ruff's banned-api rule in pyproject.toml enforces it). When one of those packages
changes, these modules are the only place to look."""
