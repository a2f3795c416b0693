"""Which backend runs a model entry, loaded: the one factory, kept apart from the spec parser
(model_specs.py) so that no backend module imports the module that imports it."""

from __future__ import annotations

from safetyrepro.adapters.backends.backend_inspect import InspectBackend
from safetyrepro.adapters.catalogue.model_specs import ENGINE, LM_EVAL, ModelEntry


def open_backend(entry: ModelEntry, precision: str, device: str | None = None, batch_size: int | None = None):
    """Load the backend a model entry names (the engine is loaded once per process and reused)."""
    if entry.kind == ENGINE:
        from safetyrepro.adapters.engine.engine import (
            load_engine,  # lazy: only the backend the entry names is loaded
        )

        return load_engine(entry.target, entry.precision or precision, device, batch_size=batch_size)
    if entry.kind == LM_EVAL:
        from safetyrepro.adapters.backends.backend_lm_eval import (
            LmEvalBackend,  # lazy: only the backend the entry names is loaded
        )

        return LmEvalBackend(entry, device, batch_size)
    if entry.provider == "safetyrepro":  # Inspect's name for the engine
        from safetyrepro.adapters.engine.engine import (
            load_engine,  # lazy: only the backend the entry names is loaded
        )

        name = entry.target.split("/", 1)[1]
        args = entry.args_dict()
        return load_engine(
            name,
            args.get("precision") or entry.precision or precision,
            args.get("device") or device,
            batch_size=int(args["batch_size"]) if args.get("batch_size") else batch_size,
        )

    return InspectBackend(entry)
