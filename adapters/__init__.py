"""SafetyRepro model adapters. Which way each file goes (the file names say it: `backend_*` we drive,
`plugin_*` we offer, `engine*` our own engine):

Backends we drive (something that computes a model's outputs, behind `backend.Backend`):
- `engine` (+ `kv_slab`, `prefix_cache`, `rowwise_attention`, `sampling`): SafetyRepro's own inference
  engine, `load_engine(model, precision, device)`: batched greedy/seeded generation and continuation
  log-likelihoods whose numbers do not depend on batching;
- `backend_lm_eval`: `lm-eval:<model>:<model_args>`, one of lm-eval's own models, driven as a backend;
- `backend_inspect`: `inspect:<provider>/<model>`, one of Inspect's own providers, driven as a backend.

Plugins we offer (our engine inside another package):
- `plugin_lm_eval`: `lm_eval --model safetyrepro` (registered by safetyrepro/lm_eval_plugin.py);
- `plugin_inspect`: Inspect's `safetyrepro/<model>` provider (registered by safetyrepro/inspect_plugin.py).

Models by name: `weights` (embedded names, paths and hub ids -> weights on disk, split packages joined
once into the cache, hashes cached), `loading` (weights -> Hugging Face model and tokenizer in bf16,
fp32 or NF4; plain HF folder export), `model_specs` (a sweep's `--models` as written -> checked
entries), `factory` (`open_backend`: an entry -> its loaded backend), `models_cli` (`safetyrepro models [list|fetch|export]`).

Everything these files need of transformers' internals is in safetyrepro/compat/transformers.py.
See docs/models.md.
"""
