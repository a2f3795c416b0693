"""SafetyRepro: configuration-conditional rank instability on alignment benchmarks."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `safetyrepro.verdict(...)` (verdict_api.py) is loaded on first use, so `import safetyrepro` stays light
    if name == "verdict":
        from safetyrepro.verdict_api import verdict

        return verdict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
