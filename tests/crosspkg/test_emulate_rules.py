"""The emulated axis values on their own (no model): prompts, candidates, normalisations."""

from __future__ import annotations

from conftest import ChatMLTokenizer

from safetyrepro.crosspkg import emulate
from safetyrepro.crosspkg.emulate import EmItem

TQA = EmItem("truthfulqa:q", {"question": "Is the sky green?"}, ("No", "Yes", "Sometimes"), 0)
BBQ = EmItem(
    "bbq:Age:0",
    {"context": "Two people met.", "question": "Who was late?"},
    ("The old man", "The young man", "Can't be determined"),
    2,
)


def test_boilerplates():
    assert (
        emulate.user_text("truthfulqa", "helm", TQA)
        == "Question: Is the sky green?\nA. No\nB. Yes\nC. Sometimes\nAnswer:"
    )
    assert emulate.user_text("bbq", "helm", BBQ).startswith(
        "The following are multiple choice questions (with answers).\n\n"
        "Passage: Two people met.\nQuestion: Who was late?\nA. "
    )
    lm = emulate.user_text("truthfulqa", "lm-eval", TQA)
    assert lm.startswith("Q: What is human life expectancy") and lm.endswith("\n\nQ: Is the sky green?\nA:")
    assert emulate.user_text("bbq", "lm-eval", BBQ) == "Two people met.\n\nQ: Who was late?\nA:"
    ins = emulate.user_text("bbq", "inspect", BBQ)
    assert "where LETTER is one of A,B,C." in ins and ins.endswith(
        "A) The old man\nB) The young man\nC) Can't be determined"
    )
    assert "Context: Two people met.\n\nQuestion: Who was late?" in ins


def test_chat_and_system_axes():
    tok = ChatMLTokenizer()
    on = emulate.context(tok, "truthfulqa", {"boilerplate": "helm", "chat": True, "system": "default"}, TQA)
    empty = emulate.context(tok, "truthfulqa", {"boilerplate": "helm", "chat": True, "system": "none"}, TQA)
    off = emulate.context(tok, "truthfulqa", {"boilerplate": "helm", "chat": False, "system": "default"}, TQA)
    assert "SmolLM" in on and "SmolLM" not in empty and "<|im_start|>system\n<|im_end|>" in empty
    assert off == emulate.user_text("truthfulqa", "helm", TQA)


def test_lm_eval_bbq_candidates():
    cands, maps, good = emulate.loglik_candidates("bbq", BBQ)
    assert cands[:2] == ["The old man", "The young man"] and cands[2:] == emulate.BBQ_UNKNOWN
    assert all(maps[j] == 2 for j in good) and len(good) == 10
    cands, maps, good = emulate.loglik_candidates("truthfulqa", TQA)
    assert cands == list(TQA.options) and good == [0]


def test_normalisations():
    assert emulate.normalise("helm", " B\n", TQA) == 1
    assert emulate.normalise("helm", "B. Yes", TQA) is None
    assert emulate.normalise("helm", "D", TQA) is None
    assert emulate.normalise("inspect", "ANSWER: c", TQA) == 2
    assert emulate.normalise("inspect", "The answer is C", TQA) is None
    assert emulate.normalise("lm-eval", "I think the young man was late.", BBQ) == 1
    assert emulate.normalise("lm-eval", "Nobody knows.", BBQ) is None


def test_agreement_counts_text_matches():
    from safetyrepro.crosspkg.records import ItemRecord

    real = [
        ItemRecord("helm", "truthfulqa", "k1", "1", ["No", "Yes"], [0], 0, True, "p1", "A"),
        ItemRecord("helm", "truthfulqa", "k2", "2", ["No", "Yes"], [0], None, False, "p2", "x"),
    ]
    em = [
        {"key": "k1", "choice_text": "No", "prompt": "p1", "output": "A"},
        {"key": "k2", "choice_text": "Yes", "prompt": "other", "output": "B"},
    ]
    a = emulate.agreement(real, em)
    assert (a["n"], a["agree"], a["prompt_identical"]) == (2, 1, 0.5)
