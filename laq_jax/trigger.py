"""The lazy upload rule of LAG/LAQ (Chen et al. 2018; Sun et al. 2019, eq. 7-8).

Worker m uploads at iteration k iff

  ||Q - Qhat||^2 >= (1 / (alpha^2 M^2)) sum_d xi_d ||theta^{k+1-d} - theta^{k-d}||^2
                     + c_e (e + ehat) + c_0,
  or its staleness clock has reached tbar.

With xi_d = xi / D. Unquantized LAG is the same rule with e = ehat = 0.

The authors' released scripts weight the history xi / k while k <= D (the k
parameter steps that exist so far), then xi / D; `history_threshold` takes
that as an option.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def history_threshold(hist_D: jax.Array, step_size: jax.Array, xi: jax.Array,
                      num_workers: int, step=None,
                      authors_code=False) -> jax.Array:
  """(1 / (alpha^2 M^2)) * sum_d xi_d h_d: the part shared by all workers.

  Args:
    hist_D: h_d, d = 1..D (0 for steps that do not exist yet).
    step_size: alpha.
    xi: the total history weight.
    num_workers: M.
    step: k (needed with `authors_code`).
    authors_code: xi_d = xi / min(k, D) (the authors' scripts) instead of
      xi / D.
  """
  memory = hist_D.shape[-1]
  divisor = jnp.asarray(memory, hist_D.dtype)
  if step is not None:
    warm = jnp.clip(step, 1, memory).astype(hist_D.dtype)
    divisor = jnp.where(authors_code, warm, divisor)
  return (xi / divisor) * jnp.sum(hist_D) / (
      jnp.square(step_size) * num_workers**2)


def threshold(shared: jax.Array, error_sq: jax.Array, last_error_sq: jax.Array,
              err_weight: jax.Array, threshold_offset: jax.Array) -> jax.Array:
  """The full right-hand side for one worker."""
  return shared + err_weight * (error_sq + last_error_sq) + threshold_offset


def should_upload(innovation_sq: jax.Array, rhs: jax.Array, clock: jax.Array,
                  max_staleness: jax.Array, lazy: jax.Array) -> jax.Array:
  """True where the worker uploads: always when not lazy, else by the rule."""
  return jnp.logical_not(lazy) | (innovation_sq >= rhs) | (clock >= max_staleness)
