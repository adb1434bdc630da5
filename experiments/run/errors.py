"""The launchers' error kinds that more than one layer raises.

`WorkdirError` lives here, below `outputs` and `events`, so that the event
writer can raise it without importing `outputs` (which imports it): no
import circle. `experiments.run.outputs.WorkdirError` is the same class.
"""


class WorkdirError(ValueError):
  """The workdir holds another config's results (and overwrite is off), or
  cannot take them (a file, unwritable, a full disk)."""
