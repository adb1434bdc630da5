"""Client-level differential privacy's mechanism: privacy parts.

The preset's `privacy` slot (`Hyper.privacy` indexes `REGISTRY`) says how a
round's uploads are privatized (the contract's B.2; docs/algorithm.md,
"Differential privacy"). Each upload candidate Delta_m (a gradient, or a
local client's model change) is first clipped to the part's norm C
(`clip`: flat L2 over all P coordinates; NaN and +-inf set to 0 first; a
zero vector unchanged), then::

  off             nothing (every preset's default; compiled out)
  dp_central      the server re-clips each reconstructed upload Q_m and
                  steps with (sum_{S_k} clip(Q_m, C) + xi) / D, xi ~
                  N(0, (z C)^2 I): D = S (clients_per_round) or q M
                  (participation q), McMahan et al.'s fixed denominator,
                  also in a round nobody took part in
  dp_distributed  each participant adds its share xi_m ~ N(0, (z C)^2 / S
                  I), the sum carrying N(0, (z C)^2 I) (secure aggregation
                  assumed, not simulated); the server's mean over S
  dp_local        each participant adds xi_m ~ N(0, (z C)^2 I) before the
                  compressor and the trigger see it: everything after is
                  post-processing

with C = `clip` and z = `noise_multiplier`, the part's own parameters
(`dp_central.clip`, `dp_local.noise_multiplier`: grid keys; `delta`, the
delta the launchers report epsilon at, `accounting`). The noise is
drawn from the stream DP_NOISE (`randomness.dp_noise_key`: client m's at
(seed, k, m), the server's at (seed, k, M)) in the run's precision. What
(epsilon, delta) a run's releases have is `laq_jax.privacy`'s (on the host).
`check` refuses the compositions the accounting does not cover, naming the
sound option.

A privacy part's fn privatizes one participant's candidate::

  fn(inputs: Inputs, *, params) -> the upload candidate the compressor sees

and a part marked `central` also makes the server's step (`central_step`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax import parts as parts_lib
from laq_jax import randomness
from laq_jax import registry


class Inputs(NamedTuple):
  """What a privacy part reads for one participant.

  Attributes:
    upload_P: its candidate, Delta_m (flat).
    key: its noise key (`randomness.dp_noise_key(seed, k, m)`).
    hyper: the run's scalar Hyper.
    sampled: S, the clients a round takes (clients_per_round; 0 under
      Poisson participation).
  """
  upload_P: jax.Array
  key: jax.Array
  hyper: Any
  sampled: Any


def clip(v_P, norm):
  """v min(1, norm / ||v||_2), flat over all coordinates, NaN and +-inf set
  to 0 first, a zero vector unchanged (jax_privacy's `clip_pytree`)."""
  v_P = jnp.where(jnp.isfinite(v_P), v_P, jnp.zeros_like(v_P))
  length = jnp.sqrt(collectives.sum_sq(v_P))
  scale = jnp.where(length > norm, norm / jnp.where(length > 0, length, 1),
                    jnp.ones_like(length))
  return v_P * scale.astype(v_P.dtype)


def gaussian(key, like_P, std):
  """N(0, std^2 I) shaped and typed as `like_P`."""
  return std.astype(like_P.dtype) * jax.random.normal(key, like_P.shape,
                                                      like_P.dtype)


def central(fn: Callable) -> Callable:
  """Marks a privacy fn whose server adds the noise (`central_step`)."""
  fn.central = True
  return fn


def is_central(part: parts_lib.Part) -> bool:
  return bool(getattr(part.fn, 'central', False))


def off(inputs: Inputs):
  """No privacy: the candidate as it is."""
  return inputs.upload_P


@central
def dp_central(inputs: Inputs, *, params):
  """Central mode's client half: Delta_m clipped to C (the server re-clips
  and adds the noise, `central_step`)."""
  return clip(inputs.upload_P, params['clip'])


def dp_distributed(inputs: Inputs, *, params):
  """Distributed mode: clip(Delta_m, C) + N(0, (z C)^2 / S I), its share of
  the sum's N(0, (z C)^2 I)."""
  c = params['clip']
  std = params['noise_multiplier'] * c / jnp.sqrt(
      jnp.maximum(inputs.sampled, 1).astype(c.dtype))
  clipped = clip(inputs.upload_P, c)
  return clipped + gaussian(inputs.key, clipped, std)


def dp_local(inputs: Inputs, *, params):
  """Local mode: clip(Delta_m, C) + N(0, (z_l C)^2 I), before the
  compressor and the trigger."""
  c = params['clip']
  clipped = clip(inputs.upload_P, c)
  return clipped + gaussian(inputs.key, clipped,
                            params['noise_multiplier'] * c)


def _params(what: str) -> list[parts_lib.Param]:
  pos = lambda a: np.isfinite(a) & (a > 0)
  nonneg = lambda a: np.isfinite(a) & (a >= 0)
  return [parts_lib.Param('clip', 1.0, check=pos,
                          allowed='a finite number > 0',
                          doc='C, the l2 norm each upload is clipped to'),
          parts_lib.Param('noise_multiplier', 1.0, check=nonneg,
                          allowed='a finite number >= 0',
                          doc=f'z, the noise\'s std over C ({what})'),
          parts_lib.Param('delta', 1e-5, check=lambda a: (a > 0) & (a < 1),
                          allowed='a number in (0, 1)',
                          doc='the delta of the (epsilon, delta) the run '
                          'reports (the accounting\'s; the mechanism does '
                          'not read it)')]


def _part(name, fn, doc, params=()):
  return parts_lib.Part('privacy', name, fn, tuple(params), None, doc,
                        opt_in=name != 'off')


REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry('privacy', [
    ('off', _part('off', off, 'no differential privacy')),
    ('dp_central', _part(
        'dp_central', dp_central,
        'DP-FedAvg, central: clip, the server re-clips and adds N(0, (zC)^2)',
        _params('on the sum, added by the server'))),
    ('dp_distributed', _part(
        'dp_distributed', dp_distributed,
        'DP-FedAvg, distributed: each of S adds N(0, (zC)^2 / S)',
        _params('of the sum, shared by the S participants'))),
    ('dp_local', _part(
        'dp_local', dp_local,
        'local DP: each participant adds N(0, (z_l C)^2) to its clipped upload',
        _params('z_l, each participant\'s own'))),
])
# PRIVACY: the registry's names (a part registered later is in it).
__getattr__ = registry.names_attribute(__name__, PRIVACY=REGISTRY)

# The mechanisms' names (laq_jax.privacy.MODES less 'off'), by part.
MODES = {'dp_central': 'central', 'dp_distributed': 'distributed',
         'dp_local': 'local'}


def index(name: str) -> int:
  """The position of `name` in PRIVACY (what `Hyper.privacy` holds)."""
  return REGISTRY.index(name)


def check_names(names: Sequence[str]) -> tuple[str, ...]:
  return REGISTRY.check_names(names)


def privatize(upload_P, key, hyper, sampled, parts: Sequence[parts_lib.Part]):
  """PRIVACY[hyper.privacy]'s privatized candidate among `parts` (static)."""
  def branch(part, upload_P, key, hyper):
    return part.call(Inputs(upload_P, key, hyper, sampled),
                     params=parts_lib.own_params(hyper, part))[0]

  return parts_lib.switch(parts_lib.local_index(hyper.privacy, parts,
                                                REGISTRY),
                          parts, branch, upload_P, key, hyper)


def central_step(uploads_MxP, taken_M, hyper, step_count, num_workers: int,
                 parts: Sequence[parts_lib.Part], axis_name=None):
  """(whether this point's privacy part is central, its server step (sum_{S_k}
  clip(Q_m, C) + xi) / D); None where no part among `parts` is central.
  D = clients_per_round, or participation times M."""
  centrals = [p for p in parts if is_central(p)]
  if not centrals:
    return None
  dtype = uploads_MxP.dtype
  which = jnp.asarray(hyper.privacy, jnp.int32)
  on = jnp.zeros((), bool)
  c = jnp.ones((), dtype)
  z = jnp.zeros((), dtype)
  for part in centrals:  # (a grid's point uses one of them, or none)
    mine = which == index(part.name)
    own = parts_lib.own_params(hyper, part)
    on = on | mine
    c = jnp.where(mine, own['clip'].astype(dtype), c)
    z = jnp.where(mine, own['noise_multiplier'].astype(dtype), z)
  clipped = jax.vmap(lambda q: clip(q, c))(uploads_MxP)
  if taken_M is not None:
    clipped = jnp.where(taken_M[:, None], clipped, jnp.zeros_like(clipped))
  total_P = collectives.sum_workers(clipped, axis_name)
  noise_P = gaussian(randomness.dp_noise_key(hyper.seed, step_count,
                                             num_workers), total_P, z * c)
  count = jnp.asarray(hyper.clients_per_round, dtype)
  denominator = jnp.where(count > 0, count,
                          jnp.asarray(hyper.participation, dtype)
                          * jnp.asarray(num_workers, dtype))
  return on, (total_P + noise_P) / denominator


def check(algorithm, values: dict, where: str = '') -> None:
  """Refuses, in one line naming the sound option, what the accounting
  (`laq_jax.privacy`) does not cover: in central mode a trigger or a bit
  count that reads the raw updates, stale uploads or weighted means (and
  so in distributed mode, which also needs eager identity uploads of a
  fixed S); in every mode SCAFFOLD's control variates and a second
  gradient on the raw sample. `values`: make_hyper's (a grid's arrays
  too)."""
  name = algorithm.privacy
  if name == 'off':
    return
  at = f' ({where})' if where else ''
  mode = MODES.get(name)
  if mode is None:  # a user's part: their own accounting
    return
  head = f'privacy={name}{at}'
  if algorithm.client == 'scaffold':
    raise ValueError(f'{head}: client scaffold uploads its control '
                     'variate\'s change unprivatized; use client=local '
                     '(FedAvg) or feddyn')
  if algorithm.trigger.startswith(('lasg', 'cada')) or (
      algorithm.estimator == 'dasha_mvr'):
    raise ValueError(
        f'{head}: {algorithm.trigger if algorithm.estimator != "dasha_mvr" else "dasha_mvr"} '
        'takes a second gradient on the raw sample, which the mechanism '
        'does not privatize; use an eager or LAG/LAQ trigger')
  absent = values.get('absent', 'auto')
  absent = algorithm.absent if absent == 'auto' else absent
  weighting = values.get('weighting', 'auto')
  weighting = algorithm.weighting if weighting == 'auto' else weighting
  if mode in ('central', 'distributed'):
    if algorithm.trigger != 'eager':
      raise ValueError(
          f'{head}: trigger {algorithm.trigger} reads raw updates (its '
          'upload-or-skip decision is visible as traffic, which the noise on '
          'the sum does not cover); use privacy=dp_local')
    if algorithm.compressor not in DATA_INDEPENDENT_BITS:
      raise ValueError(
          f'{head}: compressor {algorithm.compressor}\'s size or reconstruction '
          'depends on the data; use privacy=dp_local, or one of '
          + ', '.join(DATA_INDEPENDENT_BITS))
    if absent != 'drop':
      raise ValueError(
          f'{head}: absent=stale would add an old upload every round (no '
          'amplification, the sensitivity growing with the rounds); use '
          'absent=drop')
    if weighting != 'uniform':
      raise ValueError(
          f'{head}: weighting={weighting} is not allowed: the mechanism\'s '
          'sum is over equal, clipped uploads; use weighting=uniform')
  if mode == 'distributed':
    if not np.all(np.asarray(values.get('clients_per_round', 0)) > 0):
      raise ValueError(
          f'{head} needs clients_per_round (Poisson rounds may carry no '
          'noise); set clients_per_round=S')
    if algorithm.compressor != 'identity' or algorithm.estimator != 'direct':
      raise ValueError(
          f'{head}: only identity uploads of Delta_m (the sum of noisy '
          'shares is the release); use privacy=dp_local for compression')


def accounting(name: str, params, *, rounds: int, num_clients: int,
               participation: float = 1.0, clients_per_round: int = 0,
               participations: int | None = None) -> dict[str, Any]:
  """What a run's releases spend, on the host (`laq_jax.privacy`): the
  part, its mode, C, z, delta, epsilon after `rounds` rounds (local mode:
  `participations`, the most rounds any one client took part in), the
  accountant, the adjacency and the events' repr. z = 0: epsilon inf (no
  noise, nothing private). A part of one's own: its name alone."""
  from laq_jax import privacy as privacy_lib  # pylint: disable=g-import-not-at-top
  mode = MODES.get(name)
  out: dict[str, Any] = {'privacy': name, 'mode': mode}
  if mode is None:
    return out
  c, z, delta = (float(np.asarray(params[k]))
                 for k in ('clip', 'noise_multiplier', 'delta'))
  out.update(clip=c, noise_multiplier=z, delta=delta)
  if z == 0:
    return {**out, 'epsilon': math.inf, 'accountant': None,
            'adjacency': 'none (no noise)', 'event': None}
  setting = privacy_lib.Privacy(mode, noise_multiplier=z, delta=delta)
  sampling = dict(num_clients=num_clients, participation=participation,
                  clients_per_round=clients_per_round)
  count = participations if mode == 'local' else None
  return {**out,
          'epsilon': privacy_lib.epsilon(setting, rounds,
                                         participations=count, **sampling),
          'participations': count,
          'accountant': privacy_lib.accountant_name(
              setting, clients_per_round=clients_per_round),
          'adjacency': privacy_lib.adjacency(
              setting, clients_per_round=clients_per_round),
          'event': repr(privacy_lib.round_event(setting, **sampling))}


# Central mode compresses before the noise only where the bit count and the
# reconstruction's bound do not depend on the data (the contract's B.4).
DATA_INDEPENDENT_BITS = ('identity', 'uniform', 'top_k', 'sign', 'terngrad',
                         'rand_p')
