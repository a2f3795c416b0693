"""Model specs (`--models`, `--models-file`): parsing, stated capabilities, and the checks that run
before any model loads (wrong package, unknown lm-eval model or Inspect provider, unreachable server,
logprob asked of a chat API). No model is loaded here."""

from __future__ import annotations

import socket

import pytest

from safetyrepro.adapters.backends.backend import (
    GREEDY_EXACT,
    GREEDY_NONE,
    SEED_PER_REQUEST,
    SEED_PER_RUN,
)
from safetyrepro.adapters.catalogue.model_specs import (
    ENGINE,
    INSPECT,
    LM_EVAL,
    check_runnable,
    load_models_file,
    parse_model_args,
    parse_model_spec,
)
from safetyrepro.errors import UserError


def test_the_three_forms_parse():
    e = parse_model_spec("smollm2")
    assert (e.kind, e.target, e.label, e.packages) == (ENGINE, "smollm2", "smollm2", ("lm-eval", "inspect"))
    h = parse_model_spec("lm-eval:hf:pretrained=/models/smol,dtype=bfloat16")
    assert (h.kind, h.target, h.model_args) == (LM_EVAL, "hf", "pretrained=/models/smol,dtype=bfloat16")
    assert h.args_dict() == {"pretrained": "/models/smol", "dtype": "bfloat16"} and h.packages == ("lm-eval",)
    u = parse_model_spec("lm-eval:local-completions:base_url=http://127.0.0.1:8080/v1/completions,model=smol")
    assert u.args_dict()["base_url"] == "http://127.0.0.1:8080/v1/completions"  # colons after the name stay
    i = parse_model_spec("inspect:openai-api/llamacpp/smol")
    assert (i.kind, i.target, i.provider, i.packages) == (
        INSPECT,
        "openai-api/llamacpp/smol",
        "openai-api",
        ("inspect",),
    )


def test_stated_capabilities():
    assert parse_model_spec("smollm2").capabilities().loglikelihood
    hf = parse_model_spec("lm-eval:hf:pretrained=/x").capabilities()
    assert hf.loglikelihood and hf.greedy == GREEDY_EXACT and hf.seeds == SEED_PER_RUN
    vllm = parse_model_spec("lm-eval:vllm:pretrained=/x").capabilities()
    assert vllm.seeds == SEED_PER_REQUEST
    chat = parse_model_spec("lm-eval:local-chat-completions:base_url=http://h:1/v1,model=m").capabilities()
    assert not chat.loglikelihood and "no continuation log-likelihoods" in " ".join(chat.flags())
    api = parse_model_spec("inspect:openai-api/llamacpp/smol").capabilities()
    assert not api.loglikelihood and api.seeds == SEED_PER_REQUEST and api.input == "messages"
    assert parse_model_spec("inspect:hf/some/model").capabilities().greedy == GREEDY_NONE
    assert parse_model_spec("inspect:anthropic/claude").capabilities().flags()[1].startswith("seeds are ignored")


@pytest.mark.parametrize(
    "spec,message",
    [
        ("", "an empty model name"),
        ("lm-eval::pretrained=/x", "write lm-eval:<model>:<model_args>"),
        ("lm-eval:hf:pretrained", "'pretrained' is not key=value"),
        ("lm-eval:hf:pretrained=/x,,=3", "'=3' is not key=value"),
        ("inspect:gpt4", "write inspect:<provider>/<model>"),
        ("no-such-model", "unknown model 'no-such-model'"),
    ],
)
def test_malformed_specs_are_one_line_errors(spec, message):
    with pytest.raises(UserError, match=message):
        parse_model_spec(spec)


def test_models_file(tmp_path):
    f = tmp_path / "models.yaml"
    f.write_text(
        "models:\n"
        "  - label: smol-hf\n    spec: lm-eval:hf\n    model_args: pretrained=/m,dtype=bfloat16\n"
        "    precision: bf16\n    revision: abc\n"
        "  - smollm2\n"
        "  - {label: api, spec: 'inspect:openai-api/llamacpp/smol', model_args: {max_retries: 1}}\n"
    )
    a, b, c = load_models_file(f)
    assert (a.label, a.kind, a.model_args, a.precision, a.revision) == (
        "smol-hf",
        LM_EVAL,
        "pretrained=/m,dtype=bfloat16",
        "bf16",
        "abc",
    )
    assert (b.label, b.kind) == ("smollm2", ENGINE)
    assert (c.label, c.args_dict()) == ("api", {"max_retries": "1"})
    f.write_text("models:\n  - {spec: smollm2, colour: red}\n")
    with pytest.raises(UserError, match="unknown key.*colour"):
        load_models_file(f)
    f.write_text("models: [\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_models_file(f)
    with pytest.raises(UserError, match="cannot read models file"):
        load_models_file(tmp_path / "missing.yaml")
    f.write_text("models:\n  - {spec: 'lm-eval:hf:pretrained=/a', model_args: 'pretrained=/b'}\n")
    with pytest.raises(UserError, match="model args given twice"):
        load_models_file(f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_checks_before_loading(monkeypatch, tmp_path):
    hf = parse_model_spec(f"lm-eval:hf:pretrained={tmp_path}")
    check_runnable(hf, "lm-eval", {"logprob", "free_form"}, explicit_scoring=False)
    with pytest.raises(UserError, match=r"pretrained=/x/gone does not exist \(lm-eval would take it for a Hub repo id"):
        check_runnable(parse_model_spec("lm-eval:hf:pretrained=/x/gone"), "lm-eval", {"free_form"}, False)
    with pytest.raises(UserError, match="tokenizer=./nope does not exist"):
        check_runnable(
            parse_model_spec(f"lm-eval:hf:pretrained={tmp_path},tokenizer=./nope"), "lm-eval", {"free_form"}, False
        )
    check_runnable(
        parse_model_spec("lm-eval:hf:pretrained=HuggingFaceTB/SmolLM2-135M"), "lm-eval", {"free_form"}, False
    )  # a Hub id is lm-eval's to resolve
    with pytest.raises(UserError, match="run under --package lm-eval only"):
        check_runnable(hf, "inspect", {"free_form"}, False)
    with pytest.raises(UserError, match="run under --package inspect only"):
        check_runnable(parse_model_spec("inspect:openai/gpt-4o"), "lm-eval", {"free_form"}, False)
    with pytest.raises(UserError, match="lm-eval has no model 'nope'"):
        check_runnable(parse_model_spec("lm-eval:nope:a=1"), "lm-eval", {"free_form"}, False)
    with pytest.raises(UserError, match="Inspect has no model provider 'nope'"):
        check_runnable(parse_model_spec("inspect:nope/x"), "inspect", {"free_form"}, False)
    port = _free_port()  # nothing listens there
    down = parse_model_spec(f"lm-eval:local-completions:base_url=http://127.0.0.1:{port}/v1/completions,model=m")
    with pytest.raises(UserError, match=f"cannot reach the server at http://127.0.0.1:{port}"):
        check_runnable(down, "lm-eval", {"free_form"}, False)
    monkeypatch.setenv("NOWHERE_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(UserError, match="cannot reach the server"):
        check_runnable(parse_model_spec("inspect:openai-api/nowhere/m"), "inspect", {"free_form"}, False)
    chat = parse_model_spec("lm-eval:local-chat-completions:model=m")
    with pytest.raises(UserError, match=r"'local-chat-completions' model needs model_args base_url="):
        check_runnable(chat, "lm-eval", {"free_form", "logprob"}, explicit_scoring=False)
    with pytest.raises(UserError, match="logprob scoring needs continuation log-likelihoods"):  # said first
        check_runnable(chat, "lm-eval", {"logprob"}, explicit_scoring=True)
    with pytest.raises(UserError, match=r"'hf' model needs model_args pretrained=\.\.\."):
        check_runnable(parse_model_spec("lm-eval:hf:dtype=float32"), "lm-eval", {"free_form"}, False)


def test_model_args_parse_like_lm_eval():
    from lm_eval.utils import simple_parse_args_string

    text = "pretrained=/models/smol,dtype=bfloat16,trust_remote_code=True"
    assert parse_model_args(text) == {k: str(v) for k, v in simple_parse_args_string(text).items()}
