"""`safetyrepro flow`: an envelope sweep as an Inspect Flow spec (docs/flow.md).

The spec lists one Flow task per cell and seed: the `safetyrepro/<benchmark>` Inspect task with the
arguments and generate options the sweep's Inspect driver passes for the same configuration
(`safetyrepro.sweep.drivers.inspect_task_args` / `inspect_generate_args`), on the same items. Flow
runs it on Inspect's providers wherever Inspect runs; `safetyrepro import inspect LOGDIR` turns its
logs into the grid the sweep would have written.
"""
