"""The paper's question for a task SafetyRepro does not define: its envelope of harness choices
(`safetyrepro envelope --task ...`) and a sweep of it (`safetyrepro sweep --task ...`) that the importer reads
into the sweep's grid (docs/any_task.md)."""
