"""Local mode's n_max(k): the most rounds any one client took part in.

    n_max = most_participations(seed, rounds, num_clients=M,
                                participation=q)

Re-drawn from the run's participation stream (seed, q or S, M:
`laq_jax.round.participation.participants`, the draw the loop makes) without
training; in this process's JAX configuration, as the run's draws are (with
x64 on, the uniforms are float64).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax.privacy import accounting
from laq_jax.round import participation as participation_lib


def most_participations(seed: int, rounds: int, *, num_clients: int,
                        participation: float = 1.0,
                        clients_per_round: int = 0,
                        dtype=jnp.float32, chunk: int = 256) -> np.ndarray:
  """n_max(k) for k = 1..rounds: the most rounds any one client took part
  in up to round k, re-drawn from the run's participation stream (seed,
  q or S, M; `laq_jax.round.participation.participants`), without
  training. `dtype`: the run's precision, which q is compared in (as the
  run's Hyper holds it). int64 [rounds]."""
  accounting._sampling(num_clients, participation, clients_per_round)
  if not (accounting._integer(rounds) and rounds >= 0):
    raise ValueError(f'rounds={rounds!r} is not allowed: it must be an '
                     'integer >= 0')
  draw = _Draw(jnp.int32(seed), jnp.asarray(participation, dtype),
               jnp.int32(clients_per_round))

  @jax.jit
  def counts(steps):
    return jax.vmap(lambda k: participation_lib.participants(
        draw, k, num_clients))(steps)

  totals = np.zeros(num_clients, np.int64)
  out = np.zeros(rounds, np.int64)
  for start in range(0, rounds, chunk):
    steps = np.arange(start, min(start + chunk, rounds), dtype=np.int32)
    present = np.asarray(counts(jnp.asarray(steps))).astype(np.int64)
    running = totals + np.cumsum(present, axis=0)
    out[start:start + steps.size] = running.max(axis=1)
    totals = running[-1]
  return out


@dataclasses.dataclass(frozen=True)
class _Draw:
  """What `participation.participants` reads of a Hyper."""
  seed: object
  participation: object
  clients_per_round: object
