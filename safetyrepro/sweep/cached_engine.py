"""The engine as the sweeper hands it to lm-eval and Inspect: outputs come from the content-addressed
cache when they are there, and a sampled request also produces its sibling seeds in the same call.

Prefetching siblings is what makes a five-seed cell cheap: when the first seed's run asks for a
prompt, all five seeds are generated together (one prefill, one batched decode in the engine) and
the other four runs are served from the cache. A request's text depends only on its own prompt and
seed, so the numbers are those of five separate runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from safetyrepro.sweep.outputs_cache import OutputsCache, cache_key


class CachedEngine:
    def __init__(self, engine, cache: OutputsCache):
        self.inner = engine
        self.cache = cache
        self.prefetch_seeds: tuple[int, ...] = ()
        self.model_calls = 0

    def __getattr__(self, name: str) -> Any:  # tokenizer, model, info, render, ...
        return getattr(self.inner, name)

    def _id(self) -> dict:
        info = self.inner.info
        return {"weights": info.weights_sha256, "precision": info.precision, "device": info.device.split(":")[0]}

    def _gen_key(self, r) -> str:
        sampled = r.temperature > 0
        return cache_key(kind="gen", **self._id(), prompt=r.prompt, max_new_tokens=r.max_new_tokens,
                         temperature=r.temperature, top_p=r.top_p if sampled else 1.0,
                         seed=r.seed if sampled else None, stop=list(r.stop))

    def generate_detailed(self, requests, batch_size=None, progress=False):
        from safetyrepro.adapters.engine import GenResult

        keys = [self._gen_key(r) for r in requests]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        missing: dict[str, Any] = {}
        for k, r in zip(keys, requests):
            if k in found or k in missing:
                continue
            missing[k] = r
            if r.temperature > 0 and r.seed in self.prefetch_seeds:
                for s in self.prefetch_seeds:
                    sib = replace(r, seed=s)
                    sk = self._gen_key(sib)
                    if sk not in found and sk not in missing:
                        missing[sk] = sib
        if missing:
            sibling_found = self.cache.get_many([k for k in missing if k not in keys])
            todo = {k: r for k, r in missing.items() if k not in sibling_found}
            if todo:
                self.model_calls += 1
                results = self.inner.generate_detailed(list(todo.values()), batch_size=batch_size, progress=progress)
                fresh = {k: {"text": g.text, "n_prompt_tokens": g.n_prompt_tokens, "n_new_tokens": g.n_new_tokens,
                             "finish_reason": g.finish_reason, "seed": g.seed} for k, g in zip(todo, results)}
                self.cache.put_many(fresh)
                found.update(fresh)
        return [GenResult(**found[k]) for k in keys]

    def generate(self, requests, batch_size=None, progress=False):
        return [g.text for g in self.generate_detailed(requests, batch_size=batch_size, progress=progress)]

    def loglikelihood(self, requests, batch_size=None):
        keys = [cache_key(kind="loglik", **self._id(), context=r.context, continuation=r.continuation) for r in requests]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        todo = {k: r for k, r in zip(keys, requests) if k not in found}
        if todo:
            self.model_calls += 1
            results = self.inner.loglikelihood(list(todo.values()), batch_size=batch_size)
            fresh = {k: [float(ll), bool(g)] for k, (ll, g) in zip(todo, results)}
            self.cache.put_many(fresh)
            found.update(fresh)
        return [(found[k][0], found[k][1]) for k in keys]
