"""The cross-package anchor study (lm-eval, HELM, Inspect defaults) and its decomposition."""
