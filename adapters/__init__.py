"""SafetyRepro's models, one folder per role. "Adapters" here means what adapts a model to a harness (the model
backends, our decode engine and the plugins that carry it into lm-eval and Inspect), not HELM's adapters, which
adapt a scenario's instances into prompts (SafetyRepro's prompts come from each benchmark's definition):

- `engine/`: our own inference engine (`engine.load_engine(model, precision, device)`: batched greedy and
  seeded generation and continuation log-likelihoods whose numbers do not depend on batching; its KV
  slab, prefix cache, row-wise attention, sampling and tokenisation rules);
- `backends/`: the backends we drive, behind `backend.Backend`: the engine's, `lm-eval:<model>:<model_args>`
  (`backend_lm_eval`, one of lm-eval's own models) and `inspect:<provider>/<model>` (`backend_inspect`,
  one of Inspect's providers); `factory.open_backend` loads the one a model entry names;
- `plugins/`: the plugins we offer, our engine inside another package: `lm_eval --model safetyrepro`
  (`plugin_lm_eval`, registered by safetyrepro/lm_eval_plugin.py) and Inspect's `safetyrepro/<model>`
  provider (`plugin_inspect`, registered by safetyrepro/inspect_plugin.py);
- `catalogue/`: models by name: `weights` (embedded names, paths and hub ids -> weights on disk, split
  packages joined once into the cache, hashes cached), `loading` (weights -> Hugging Face model and
  tokenizer in bf16, fp32 or NF4; plain HF folder export), `model_specs` (a sweep's `--models` as written
  -> checked entries), `models_cli` (`safetyrepro models [list|fetch|export]`).

Everything these files need of transformers' internals is in safetyrepro/compat/transformers.py.
See docs/models.md.
"""
