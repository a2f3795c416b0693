"""How a prompt becomes model input, with lm-eval's joining rules so both packages build the same text.

A prompt is a `Prompt`: an optional system text, few-shot turns, and the question. Chat models get
it as messages (system role, demonstrations as user/assistant turns) through their chat template;
models without one get the plain-text join that lm-eval's `fewshot_context` produces:

    system + (user + " " + assistant + "\\n\\n") * k + user

A candidate continuation is appended after `TARGET_DELIMITER` in plain text and directly after the
generation prompt in chat, as lm-eval does under `--apply_chat_template`.
"""

from __future__ import annotations

from dataclasses import dataclass

TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"


@dataclass(frozen=True)
class Turn:
    user: str
    assistant: str


@dataclass(frozen=True)
class Prompt:
    system: str | None
    demos: tuple[Turn, ...]
    user: str

    def messages(self) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        for d in self.demos:
            msgs += [{"role": "user", "content": d.user}, {"role": "assistant", "content": d.assistant}]
        return msgs + [{"role": "user", "content": self.user}]

    def plain(self) -> str:
        return plain_text(self.messages())


def plain_text(messages: list[dict[str, str]]) -> str:
    """Join chat messages the way lm-eval renders them without a chat template."""
    out = []
    for i, m in enumerate(messages):
        last = i == len(messages) - 1
        if m["role"] == "system":
            out.append(m["content"])
        elif m["role"] == "user":
            out.append(m["content"] + ("" if last else TARGET_DELIMITER))
        else:
            out.append(m["content"] + ("" if last else FEWSHOT_DELIMITER))
    return "".join(out)


def continuation(candidate: str, chat: bool) -> str:
    """The string scored after the context for one candidate."""
    return candidate if chat else TARGET_DELIMITER + candidate
