"""SafetyRepro: configuration-conditional rank instability on alignment benchmarks."""

__version__ = "0.1.0"
