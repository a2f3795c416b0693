"""The grid contract: what every reader of a grid agrees on, below the analysis that computes from it.

- `grid_io.py`: reading a grid (csv or parquet) and checking it against the contract columns and the rules (the
  checks `analyze` makes), a run's precision and package group, and the pairs of models in the contract's order;
- `exact.py`: the lattice item and cell scores lie on, and the one comparison rule (equal fractions of a cell's
  answers are equal floats);
- `item_validation.py`: the per-item records (items.parquet): their columns and the checks every reader makes;
- `cell_timing.py`: what a cell's items cost, from a run's timing files;
- `direction.py`: which way is better, per benchmark, as its definition declares it.

Read by the analysis, the importers, the Every Eval Ever export, certify and `verdict`.
"""
