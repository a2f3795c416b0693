"""The prompt templates T1-T4: what each one is, and the traits the code reads instead of its name.

A benchmark writes its own text for every template (`TemplateText` in its module); what a template
*does* is stated once here. Code asks `template_kind(name).reasoning`, never `name == "T4"`, so a new
template is one entry below (plus its text in each benchmark and its name in the rules file).
"""

from __future__ import annotations

from dataclasses import dataclass

from safetyrepro.errors import one_of


@dataclass(frozen=True)
class TemplateKind:
    """One template across benchmarks.

    `reasoning`: the reply reasons first and ends with an `Answer: ...` line. Demonstrations and
    logprob candidates then carry the `Answer:` cue, a free-form reply is parsed after its last cue,
    and generation stops only where a new question would begin (not at the first blank line).
    """

    name: str
    summary: str
    reasoning: bool = False


TEMPLATE_KINDS: dict[str, TemplateKind] = {
    t.name: t
    for t in (
        TemplateKind("T1", "minimal (HELM-style)"),
        TemplateKind("T2", "role-framed system preamble"),
        TemplateKind("T3", "lm-eval-style detailed multiple-choice instruction"),
        TemplateKind("T4", "chain of thought ending in an Answer: line", reasoning=True),
    )
}


def template_kind(name: str) -> TemplateKind:
    if name not in TEMPLATE_KINDS:
        raise one_of("template", name, TEMPLATE_KINDS)
    return TEMPLATE_KINDS[name]
