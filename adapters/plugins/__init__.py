"""The plugins we offer: our engine inside another package, `lm_eval --model safetyrepro` (registered by
safetyrepro/lm_eval_plugin.py) and Inspect's `safetyrepro/<model>` provider (registered by
safetyrepro/inspect_plugin.py)."""
