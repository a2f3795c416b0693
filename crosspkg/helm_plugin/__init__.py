"""SafetyRepro's benchmarks as HELM run specs
(`helm-run --run-entries safetyrepro_bbq:template=T3,scoring=logprob,...`).

Registered through HELM's `helm` entry-point group (pyproject: `[project.entry-points.helm]`), so
`helm-run` finds them once SafetyRepro is installed in HELM's environment (`make helm`). Modules:
`run_specs` (the run spec functions), `scenario` (items from the shared definitions), `metrics`
(SafetyRepro's own scoring), `client` (a HELM client on SafetyRepro's engine, which scores a
candidate after the chat-templated context: SafetyRepro's logprob definition, which HELM's
HuggingFaceClient does not compute when it applies a chat template).
"""
