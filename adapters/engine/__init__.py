"""SafetyRepro's own inference engine: batched greedy and seeded generation and continuation log-likelihoods
whose numbers do not depend on batching (docs/models.md, docs/performance.md)."""
