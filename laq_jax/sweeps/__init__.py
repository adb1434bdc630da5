"""Grids of points and what they measure: the vmapped sweep, its metrics,
the record of a run and the figures."""
