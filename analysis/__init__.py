"""SafetyRepro analysis, by role: `metrics/` (rho_flip, orderings and the rest of the paper's metrics), `paired/`
(paired tests and power), `render/` (report, card, figures, the output folder); `pipeline.py` runs them on one grid,
`tables.py` takes a table added in one file, `api.py` is the Python API."""
