"""SafetyRepro analysis: rho_flip, orderings and the rest of the paper's metrics, report and figures."""
