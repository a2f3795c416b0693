"""SafetyRepro model adapters: loading models once and the inference engine behind every package."""
