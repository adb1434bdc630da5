"""What the server sends the workers after its step: broadcast parts.

After the server's update theta^{k+1}, the broadcast stage sends each worker
the parameters it computes at next, thetahat^{k+1}, and counts its bits. The
broadcast part decides both from theta^{k+1} and the last broadcast
thetahat^k (which every worker holds)::

  full       thetahat = theta (32 p bits)                        most presets
  quantized  thetahat^k + Q_b(theta^{k+1} - thetahat^k) with     two_laq
             LAQ's quantizer at b = Hyper.downlink_bits (b p + 32)
  ef21p      thetahat^k + top_k_down(theta^{k+1} - thetahat^k)   ef21_p_*
  ef21bc     theta, as top_k_down(agg - G) of the server         ef21_bc
             part ef21bc_server, from which the workers step

(`Hyper.broadcast` indexes `REGISTRY`; a preset's `downlink` flag picks one
of the two, and the slot `'laq+broadcast=quantized'` another.) A user's
broadcast is `parts.broadcast(name, fn, params=...)` registered in
`REGISTRY`; its fn is ::

  fn(inputs: Inputs[, params=]) -> (thetahat_P, bits)

with `bits` what each worker receives (int32). Its memory is the last
broadcast itself (`Inputs.last_broadcast_P`, which the workers hold:
EF21-P's error-feedback downlink is thetahat^k + C(theta^{k+1} -
thetahat^k)); a broadcast part has no state of its own (EF21-BC's memory,
the compressed aggregate G, is its server part's state). A
program compiles the broadcast stage's parts in only where a point's
broadcast is not `full` (`RunSpec.downlink`): then the workers compute at
thetahat, and the logged objective is f at the server's theta.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import parts as parts_lib
from laq_jax import registry
from laq_jax.parts import codecs
from laq_jax.parts import compressors
from laq_jax.parts import quantize
from laq_jax.show import show


class Inputs(NamedTuple):
  """What a broadcast part reads.

  Attributes:
    theta_P: theta^{k+1}, the server's parameters after its step.
    last_broadcast_P: thetahat^k, what the workers hold (theta^0 at start).
    hyper: the run's scalar Hyper.
    step_count: k, the round whose result this broadcast sends (0 first).
  """
  theta_P: jax.Array
  last_broadcast_P: jax.Array
  hyper: Any
  step_count: Any = 0


def laq_downlink(inputs: Inputs):
  """theta itself (32 p bits) for 'full'; thetahat^k + Q_b(theta^{k+1} -
  thetahat^k) with LAQ's quantizer at b = `Hyper.downlink_bits` (b p + 32
  bits) for 'quantized'.

  The two built-ins are this one function, reading which of them runs from
  the Hyper (`downlink_bits` > 0 only for 'quantized': `make_hyper` sets it
  0 for 'full'), as the broadcast stage did before broadcasts were parts: a
  program that compiles both holds one branch for them.
  """
  theta_P, hyper = inputs.theta_P, inputs.hyper
  num_params = theta_P.shape[-1]
  full = jnp.int32(32 * num_params)

  def quantized():
    q = quantize.quantize_innovation(theta_P, inputs.last_broadcast_P,
                                     jnp.maximum(hyper.downlink_bits, 1))
    return q.value_P, hyper.downlink_bits * num_params + 32

  # A conditional: a run with a full-precision broadcast pays nothing.
  return jax.lax.cond(hyper.downlink_bits > 0, quantized,
                      lambda: (theta_P, full))


def ef21p(inputs: Inputs):
  """EF21-P's broadcast (Gruntkowska, Tyurin, Richtarik, ICML 2023):
  thetahat^k + C_P(theta^{k+1} - thetahat^k) with C_P the compressor
  `top_k_down` (its own k), its bits k (32 + ceil(log2 p)) per worker."""
  out = compressors.top_k(inputs.theta_P, inputs.last_broadcast_P, None,
                          inputs.hyper,
                          params=inputs.hyper.params['top_k_down'])
  return out.value_P, out.bits


def ef21bc(inputs: Inputs):
  """EF21-BC's broadcast (Fatkhullin et al. 2021): the server sends
  C_M(agg - G), the change of its compressed aggregate G (the server part
  `ef21bc_server`), and every worker updates its copies of G and theta
  itself, so the workers hold theta^{k+1} exactly. Its bits per worker are C_M's
  (`top_k_down`: k (32 + ceil(log2 p))); with the warm start the first
  round sends G = agg in full, 32 p."""
  theta_P, hyper = inputs.theta_P, inputs.hyper
  num_params = theta_P.shape[-1]
  k = compressors.top_k_count(hyper.params['top_k_down']['k'], num_params)
  first = hyper.warm_start & (jnp.asarray(inputs.step_count) == 0)
  return theta_P, jnp.where(first, jnp.int32(32 * num_params),
                            compressors.top_k_bits(k, num_params))


def _ef21bc_first(hyper, step) -> bool:
  """The warm start's round: G = agg sent in full (as `ef21bc` counts)."""
  return bool(np.asarray(hyper.warm_start)) and int(step) == 0


# EF21-BC's wire: the server's C_M(agg - G) as a top_k_down payload against
# G (on the warm start's round G itself, in full); each worker adds it to
# its G and steps its theta as the server part does (`deploy`).
_EF21BC_WIRE = codecs.Downlink(
    server='ef21bc_server',
    compressor=lambda first: 'identity' if first else 'top_k_down',
    first=_ef21bc_first,
    triple=lambda step_P, before, after: (step_P, before.g_P, after.g_P),
    step=lambda theta_P, g_P, hyper: theta_P - hyper.step_size * g_P)


REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry(
    'broadcast', [
        ('full', parts_lib.broadcast(
            'full', laq_downlink, doc='theta itself, 32 p bits')),
        ('quantized', parts_lib.broadcast(
            'quantized', laq_downlink,
            doc='thetahat + Q_b(theta - thetahat), LAQ\'s quantizer')),
        ('ef21p', parts_lib.broadcast(
            'ef21p', ef21p, opt_in=True, reads=('top_k_down',),
            doc='EF21-P: thetahat + top_k_down(theta - thetahat)')),
        ('ef21bc', parts_lib.broadcast(
            'ef21bc', ef21bc, opt_in=True, reads=('top_k_down',),
            wire=_EF21BC_WIRE,
            doc='EF21-BC: top_k_down(agg - G), the change of the server '
            'part ef21bc_server; the workers hold theta')),
    ])


def index(name: str) -> int:
  """The position of `name` in BROADCASTS (what `Hyper.broadcast` holds)."""
  return REGISTRY.index(name)


# BROADCASTS: the registry's names (a broadcast registered later is in it).
__getattr__ = registry.names_attribute(__name__, BROADCASTS=REGISTRY)


def check_names(names: Sequence[str]) -> tuple[str, ...]:
  """`names` as a tuple of known broadcasts, in BROADCASTS order."""
  return REGISTRY.check_names(names)


def broadcast(theta_P, last_broadcast_P, hyper,
              parts: Sequence[parts_lib.Part], step_count=0):
  """(thetahat^{k+1}, the bits each worker receives, int32) of
  BROADCASTS[hyper.broadcast] among `parts` (static; one outside them
  selects the first: `RunSpec.check_hyper` refuses it) after round
  `step_count`.

  Raises:
    ValueError: a part among them keeps state (a broadcast's memory is the
      last broadcast).
  """
  for part in parts:
    if part.stateful:
      raise ValueError(f'broadcast {show(part.name)} has an init: a broadcast '
                       'part keeps no state of its own (its memory is the '
                       'last broadcast, Inputs.last_broadcast_P)')

  def branch(part, theta_P, last_broadcast_P, hyper):
    value_P, bits = part.call(Inputs(theta_P, last_broadcast_P, hyper,
                                     step_count),
                              params=parts_lib.own_params(hyper, part))[0]
    return value_P, jnp.asarray(bits, jnp.int32)

  return parts_lib.switch_merged(hyper.broadcast, parts, REGISTRY, branch,
                                 theta_P, last_broadcast_P, hyper)
