"""Models by name: `weights` (embedded names, paths and hub ids -> weights on disk), `loading` (weights ->
Hugging Face model and tokenizer in bf16, fp32 or NF4; plain HF folder export), `model_specs` (a sweep's
`--models` as written -> checked entries), `models_cli` (`safetyrepro models`)."""
