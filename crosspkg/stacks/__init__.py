"""Each package's own default stack, run on the anchor: lm-eval, HELM and Inspect."""
