"""laq-jax benchmarks: `python benchmarks/run.py`, `python benchmarks/sweep.py`.

The modules of `run.py`: `timing` (how a program is timed), `machine` (what
the machine is and what it reaches), `workloads` (laq vs gd and the programs
it is measured against), `vs_numpy` (laq-jax vs the NumPy oracle of
tests/reference.py, and the self-check), `grids` (sweeps and their memory),
`report` (the printed table).
"""
