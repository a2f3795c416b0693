"""The anytime-valid engine: numbers that stay valid however long a run goes on and wherever it stops.

- `confidence_sequence.py`: betting confidence sequences for bounded means, with replacement (`IidBettingCS`,
  items as draws from a population) and without (`WorBettingCS`, a fixed subset, exact once every item is in);
- `control_variate.py`: the same sequences on a costly difference corrected by a cheap twin's;
- `closed_testing.py`: the closed test that turns the sequences' rejections into claims at a familywise alpha;
- `evidence.py`: one configuration's pairs as certify reads them (paired differences, or CrowS-Pairs' two
  shares), and the claims read from a closed test's rejections;
- `stopping.py`: the stopping rules for an evaluation that is still running (safetyrepro.stopping wraps them
  as Inspect's early-stopping manager).

Every input carries its direction (a score a better model sits closer to, or none: higher is better); nothing
here looks a benchmark up by name. It imports nothing of SafetyRepro's but the ground floor.
"""
