"""`inspect:<provider>/<model>`: one of Inspect's own model providers as a Backend.

The model is `inspect_ai.model.get_model(<provider>/<model>, **model_args)`, exactly what
`inspect eval --model <provider>/<model> -M k=v` builds, with the provider's own environment
variables for base URLs and keys (`openai-api/<service>/...` reads `<SERVICE>_BASE_URL` and
`<SERVICE>_API_KEY`). Requests carry the chat messages themselves (as JSON): the provider or its
server applies the chat template, so the rendered input is the message list. Temperature, top_p,
seed, max_tokens and stop strings go into Inspect's GenerateConfig. Providers give no continuation
log-likelihoods: such models run free-form cells only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import anyio

from safetyrepro.adapters.backends.backend import (
    BackendIdentity,
    GenRequest,
    GenResult,
    LoglikRequest,
    StatedBackend,
)
from safetyrepro.adapters.catalogue.model_specs import (
    ModelEntry,
    build_inspect_model,
    inspect_base_url,
)
from safetyrepro.errors import UserError


class InspectBackend(StatedBackend):
    asynchronous = True  # generate from Inspect's own event loop (agenerate)

    def __init__(self, entry: ModelEntry):
        self.entry = entry
        self.model = build_inspect_model(entry)
        self._capabilities = entry.capabilities()
        base_url = entry.args_dict().get("base_url") or inspect_base_url(entry.target)
        self._identity = BackendIdentity(
            "inspect",
            entry.spec,
            entry.label,
            entry.precision or "api",
            None,
            entry.revision,
            extra={"model": entry.target, "model_args": entry.model_args, "base_url": base_url},
        )

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return json.dumps(messages, ensure_ascii=False)  # the server applies its own template to the messages

    def _config(self, r: GenRequest):
        from inspect_ai.model import GenerateConfig

        sampled = r.temperature > 0
        return GenerateConfig(
            temperature=r.temperature,
            top_p=r.top_p if sampled and r.top_p < 1 else None,
            seed=r.seed if sampled else None,
            max_tokens=r.max_new_tokens,
            stop_seqs=list(r.stop) or None,
        )

    async def agenerate(self, r: GenRequest) -> GenResult:
        from safetyrepro.tasks.inspect_tasks import chat_messages

        out = await self.model.generate(chat_messages(json.loads(r.prompt)), config=self._config(r))
        usage = out.usage
        return GenResult(
            out.completion,
            int(getattr(usage, "input_tokens", 0) or 0),
            int(getattr(usage, "output_tokens", 0) or 0),
            "length" if out.stop_reason == "max_tokens" else "stop" if out.stop_reason == "stop" else "unknown",
            r.seed if r.temperature > 0 else None,
        )

    def generate_detailed(
        self, requests: Sequence[GenRequest], batch_size: int | None = None, progress: bool = False
    ) -> list[GenResult]:
        """Outside Inspect's event loop (tests, benchmarks): the requests concurrently in a loop of their own."""

        async def main():
            results: list[GenResult | None] = [None] * len(requests)

            async def one(i: int, r: GenRequest):
                results[i] = await self.agenerate(r)

            async with anyio.create_task_group() as tg:
                for i, r in enumerate(requests):
                    tg.start_soon(one, i, r)
            return results

        return anyio.run(main)

    def loglikelihood(self, requests: Sequence[LoglikRequest], batch_size: int | None = None):
        raise UserError(f"{self.entry.label}: Inspect providers give no continuation log-likelihoods")

    def close(self) -> None:
        self.model = None
