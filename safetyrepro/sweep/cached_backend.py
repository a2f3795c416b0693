"""A backend as the sweeper hands it to lm-eval and Inspect: outputs come from the content-addressed
cache when they are there, and a sampled request also produces its sibling seeds in the same call.

Prefetching siblings is what makes a five-seed cell cheap: when the first seed's run asks for a
prompt, all five seeds are generated together (one prefill, one batched decode in the engine) and
the other four runs are served from the cache. A request's text depends only on its own prompt and
seed, so the numbers are those of five separate runs. Backends whose seeds are not per-request
(`Capabilities.seeds`) get no prefetch: their requests run as the package sent them.

Keys hold the backend's identity (`BackendIdentity.cache_fields`: for the engine the weights' hash,
precision and device, and for generations its decode version; for lm-eval and Inspect models the spec,
model args, base URL, revision and the hash of local weight files), the exact model input, the decoding
settings and the seed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from safetyrepro.adapters.backends.backend import SEED_PER_REQUEST, GenResult
from safetyrepro.sweep.outputs_cache import OutputsCache, cache_key
from safetyrepro.tasks.sources import cache_dir


class CachedBackend:
    def __init__(self, backend, cache: OutputsCache):
        self.inner = backend
        self.cache = cache
        self.prefetch_seeds: tuple[int, ...] = ()
        self.model_calls = 0
        self._fields = backend.identity.cache_fields()
        self._gen_fields = backend.identity.gen_cache_fields()

    def __getattr__(self, name: str) -> Any:  # identity, capabilities, render, tokenizer, info, ...
        return getattr(self.inner, name)

    def _gen_key(self, r) -> str:
        sampled = r.temperature > 0
        return cache_key(
            kind="gen",
            **self._gen_fields,
            prompt=r.prompt,
            max_new_tokens=r.max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p if sampled else 1.0,
            seed=r.seed if sampled else None,
            stop=list(r.stop),
        )

    def generate_detailed(self, requests, batch_size=None, progress=False):
        keys = [self._gen_key(r) for r in requests]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        prefetch = self.prefetch_seeds if self.inner.capabilities.seeds == SEED_PER_REQUEST else ()
        missing: dict[str, Any] = {}
        for k, r in zip(keys, requests):
            if k in found or k in missing:
                continue
            missing[k] = r
            if r.temperature > 0 and r.seed in prefetch:
                for s in prefetch:
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
                fresh = {
                    k: {
                        "text": g.text,
                        "n_prompt_tokens": g.n_prompt_tokens,
                        "n_new_tokens": g.n_new_tokens,
                        "finish_reason": g.finish_reason,
                        "seed": g.seed,
                    }
                    for k, g in zip(todo, results)
                }
                self.cache.put_many(fresh)
                found.update(fresh)
        return [GenResult(**found[k]) for k in keys]

    async def agenerate(self, r) -> GenResult:
        """One request of a backend that generates on Inspect's event loop (`asynchronous`), through the cache."""
        key = self._gen_key(r)
        found = self.cache.get_many([key])
        if key not in found:
            self.model_calls += 1
            g = await self.inner.agenerate(r)
            found[key] = {
                "text": g.text,
                "n_prompt_tokens": g.n_prompt_tokens,
                "n_new_tokens": g.n_new_tokens,
                "finish_reason": g.finish_reason,
                "seed": g.seed,
            }
            self.cache.put_many({key: found[key]})
        return GenResult(**found[key])

    def generate(self, requests, batch_size=None, progress=False):
        return [g.text for g in self.generate_detailed(requests, batch_size=batch_size, progress=progress)]

    def loglikelihood(self, requests, batch_size=None, exact=None):
        extra: dict[str, Any] = {}
        kwargs: dict[str, Any] = {}
        if hasattr(self.inner, "exact_scores"):  # the engine: which head scored (engine docs)
            exact = self.inner.exact_scores if exact is None else exact
            extra["head"] = "fp32" if exact else "model"
            kwargs["exact"] = exact
        keys = [
            cache_key(kind="loglik", **self._fields, **extra, context=r.context, continuation=r.continuation)
            for r in requests
        ]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        todo = {k: r for k, r in zip(keys, requests) if k not in found}
        if todo:
            self.model_calls += 1
            results = self.inner.loglikelihood(list(todo.values()), batch_size=batch_size, **kwargs)
            fresh = {k: [float(ll), bool(g)] for k, (ll, g) in zip(todo, results)}
            self.cache.put_many(fresh)
            found.update(fresh)
        return [(found[k][0], found[k][1]) for k in keys]


def outputs_cache_path():
    """The outputs cache shared by every sweep: `$SAFETYREPRO_CACHE_DIR/outputs.sqlite`."""
    return cache_dir() / "outputs.sqlite"
