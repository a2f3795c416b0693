"""A HELM client on SafetyRepro's engine.

Prompts from the SafetyRepro scenario carry their messages (scenario.encode_messages); the client
renders them with `engine.render` (the model's chat template with the system role and the
demonstrations as turns, or lm-eval's plain-text join without a template), exactly as SafetyRepro's
lm-eval and Inspect paths do.

- Generation (max_tokens > 0): greedy when temperature is 0 (HELM's own HuggingFaceClient samples at
  1e-7 instead), else seeded sampling; stop sequences as given.
- Scoring (echo_prompt, max_tokens 0; HELM's multiple_choice_separate adapter sends the prompt
  followed by one candidate): the candidate's summed log-likelihood after the rendered context, as
  `Engine.loglikelihood` computes it, in `completion.logprob`, with per-token log-probabilities in
  `completion.tokens`. HELM's own client applies the chat template to prompt+candidate and then scores
  the template's closing tokens instead of the candidate (FINDINGS, "chat template").
"""

from __future__ import annotations

import time

from helm.clients.client import Client
from helm.common.request import GeneratedOutput, Request, RequestResult, Token

from safetyrepro.adapters.engine.engine import Engine, GenRequest, LoglikRequest, load_engine
from safetyrepro.crosspkg.helm_plugin.scenario import decode_prompt
from safetyrepro.tasks.rendering import continuation


class SafetyReproEngineClient(Client):
    def __init__(
        self,
        pretrained_model_name_or_path: str,
        precision: str = "bf16",
        device: str = "cpu",
        batch_size: int = 8,
        **_injected,
    ):
        self.model_path, self.precision, self.device, self.batch_size = (
            str(pretrained_model_name_or_path),
            precision,
            device,
            int(batch_size),
        )
        self._engine: Engine | None = None

    @property
    def engine(self):
        if self._engine is None:
            self._engine = load_engine(self.model_path, self.precision, self.device, batch_size=self.batch_size)
        return self._engine

    def _context(self, messages, text: str) -> str:
        if messages is None:
            return text
        return self.engine.render(messages)

    def make_request(self, request: Request) -> RequestResult:
        t0 = time.time()
        messages, rest = decode_prompt(request.prompt)
        eng = self.engine
        if request.echo_prompt and request.max_tokens == 0:
            if messages is None:
                raise ValueError("the SafetyRepro engine client scores only SafetyRepro scenario prompts")
            context = eng.render(messages)
            cont = continuation(rest, eng.has_chat_template) if rest else ""
            ((ll, _),) = eng.loglikelihood([LoglikRequest(context, cont)])
            ctx_ids, cont_ids = eng.encode_pair(context, cont)
            # per-token values for display; the summed value is `logprob`
            per_tok = _token_logprobs(eng, ctx_ids, cont_ids)
            tokens = [
                Token(text=eng.tokenizer.decode([t]), logprob=lp) for t, lp in zip(cont_ids, per_tok, strict=True)
            ]
            out = GeneratedOutput(text=cont, logprob=float(ll), tokens=tokens)
        else:
            context = self._context(messages, rest)
            seed = int(request.random) if request.random is not None and str(request.random).isdigit() else None
            res = eng.generate_detailed(
                [
                    GenRequest(
                        context,
                        int(request.max_tokens),
                        float(request.temperature),
                        float(request.top_p),
                        seed if request.temperature > 0 else None,
                        tuple(request.stop_sequences or ()),
                    )
                ]
            )[0]
            out = GeneratedOutput(text=res.text, logprob=0.0, tokens=[], finish_reason={"reason": res.finish_reason})
        return RequestResult(success=True, cached=False, request_time=time.time() - t0, completions=[out], embedding=[])


def _token_logprobs(engine, ctx_ids, cont_ids) -> list[float]:
    out = []
    for i in range(len(cont_ids)):
        ((lp, _),) = engine.loglikelihood_tokens([(list(ctx_ids) + list(cont_ids[:i]), [cont_ids[i]])])
        out.append(float(lp))
    return out
