"""Benchmark definitions, templates, scorers and the envelope: the one source every package reads."""
