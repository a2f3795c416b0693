"""The backends we drive, behind `backend.Backend`: the engine's, `lm-eval:<model>:<model_args>` (one of
lm-eval's own models) and `inspect:<provider>/<model>` (one of Inspect's providers); `factory.open_backend`
loads the one a model entry names."""
