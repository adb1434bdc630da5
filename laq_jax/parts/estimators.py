"""What a worker makes of its gradient before the trigger decides: estimators.

A worker holds g_m (its gradient this round, with error feedback's memory
added where that is on) and the server holds Q-hat_m (its last upload). The
estimator turns them into the candidate upload Q_m, the value the server
would hold if the worker uploads, and its size in bits; the trigger then
decides on Q_m, and a skip keeps Q-hat_m and costs nothing. The estimator
calls the compressor slot itself (`Inputs.compress`), so an estimator that
compresses twice, or something other than g - Q-hat, is a part of its own and
no branch in the round (docs/algorithm.md, "The round in code: its stages")::

  direct      Q_m = C(g_m)                        QSGD, top-k, FedAvg, ...
  innovation  Q_m = Q-hat_m + C(g_m - Q-hat_m)     LAQ, EF21, LAG, two-way

(both one function, `reference`, reading which it is from the Hyper;
`Hyper.estimator` indexes `REGISTRY`; a preset's `innovation` flag picks one
of these two, and the slot `'qsgd+estimator=innovation'` another.) A user's
estimator is `parts.estimator(name, fn, params=..., init=...)` registered in
`REGISTRY`; its fn is ::

  fn(inputs: Inputs[, params=][, state=]) -> (Compressed, compressor states)
                                   or ((Compressed, compressor states), state)

where `inputs.compress(x_P, ref_P, states)` is the compressor slot, ref +
C(x - ref) with its bits, threading the compressor's own memory (`states`,
given as `inputs.compressor_states`): return what the last call gave back.
An estimator's own state (per worker, in `RuleState.parts_M`) moves with every
round the worker takes part in, whether it uploads or not (the memory y_m of
the 3PC family and MARINA is the gradient of the worker's last round; a
compressor's moves only with an upload).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax import parts as parts_lib
from laq_jax import registry
from laq_jax.parts import codecs
from laq_jax.parts import compressors as compressors_lib


class Inputs(NamedTuple):
  """What an estimator reads for one worker.

  Attributes:
    grad_P: g_m, the worker's gradient (plus error feedback's memory where
      that is on).
    qhat_P: Q-hat_m, what the server holds of the worker (its last upload).
    key: the worker's compressor key this round.
    hyper: the run's scalar Hyper.
    compress: the compressor slot, `compress(x_P, ref_P, states) ->
      (Compressed, states)`: ref + C(x - ref) and its exact bits, with
      C = COMPRESSORS[hyper.compressor].
    compressor_states: {name: this worker's state} of the stateful
      compressors (thread them through `compress`).
    compress_b: the second compressor slot, `compress_b(x_P, ref_P) ->
      Compressed` with C = COMPRESSORS[hyper.compressor_b] under its own
      key (`fold_in(key, 1)`); stateless (3PC's two-stage estimators).
    coin: u_k, the round's uniform in [0, 1) shared by every worker
      (`randomness.round_coin`: MARINA's c_k = [u_k < p]).
    gradient_at: theta_P -> the worker's gradient at other parameters on
      this round's sample (LASG's same-sample pair; DASHA-MVR's), or None
      where the round has none.
    theta_P: the parameters the worker computed g at (thetahat^k).
  """
  grad_P: jax.Array
  qhat_P: jax.Array
  key: jax.Array
  hyper: Any
  compress: Callable | None
  compressor_states: dict
  compress_b: Callable | None = None
  coin: Any = None
  gradient_at: Callable | None = None
  theta_P: Any = None


def reference(inputs: Inputs):
  """Q = ref + C(g - ref) with ref = Q-hat for the estimator 'innovation'
  (LAQ's quantized innovation, EF21's compressed difference) and 0 for
  'direct' (the gradient itself compressed: QSGD, top-k, FedAvg's model
  change).

  The two built-ins are this one function, reading which of them runs from
  `Hyper.estimator` as the rule read `Hyper.innovation` before estimators
  were parts: a program that compiles both holds one branch for them
  (`estimate`), so a grid point computes what its run alone does, bit for
  bit, and the same program as before.
  """
  hyper = inputs.hyper
  ref_P = jnp.where(hyper.estimator == index('innovation'), inputs.qhat_P,
                    jnp.zeros_like(inputs.qhat_P))
  return inputs.compress(inputs.grad_P, ref_P, inputs.compressor_states)


# ----------------------------------------------------------------------------
# The 3PC family (Richtarik, Sokolov, Gasanov, Fatkhullin, Li, Gorbunov, ICML
# 2022, Table 1) and MARINA (Gorbunov et al., ICML 2021): x = g, h = Q-hat,
# y the worker's gradient at its last round (each estimator's state, set to
# g every round, upload or skip). A difference the server adds to its copy
# is compressed against 0, so the upload is exactly C(.) (`_compressed`).

def _zeros(name: str):
  """The init of an estimator whose state is one vector `name`, 0 at the
  start."""
  def init(num_params, dtype, *, theta_P):
    del theta_P
    return {name: jnp.zeros((num_params,), dtype)}
  return init


_y_init, _h_init = _zeros('y'), _zeros('h')


def _compressed(compress, v_P, states):
  """C(v) itself (compressed against 0) and the states it leaves."""
  return compress(v_P, jnp.zeros_like(v_P), states)


def tpc_v1(inputs: Inputs, *, state):
  """3PC v1: Q = y + C(g - y). Idealized: the server cannot rebuild it
  without y (the authors' script counts C's values only, as here)."""
  out = inputs.compress(inputs.grad_P, state['y'], inputs.compressor_states)
  return out, {'y': inputs.grad_P}


def tpc_v2(inputs: Inputs, *, state):
  """3PC v2: b = Q-hat + Q(g - y) with Q the second slot (randk_b), then
  Q = b + C(g - b); both sent, their bits added."""
  g = inputs.grad_P
  q = inputs.compress_b(g - state['y'], jnp.zeros_like(g))
  b = inputs.qhat_P + q.value_P
  out, states = inputs.compress(g, b, inputs.compressor_states)
  return (out._replace(bits=out.bits + q.bits), states), {'y': g}


def tpc_v3(inputs: Inputs, *, params, state):
  """3PC v3: b = LAG's C_{h,y}(g) (g if ||g - Q-hat||^2 > zeta ||g - y||^2,
  else Q-hat), then Q = b + C(g - b): the full gradient (32 p bits) when
  LAG's test fires, else an EF21 step."""
  g = inputs.grad_P
  fires = (collectives.sum_sq(g - inputs.qhat_P)
           > params['zeta'] * collectives.sum_sq(g - state['y']))
  b = jnp.where(fires, g, inputs.qhat_P)
  out, states = inputs.compress(g, b, inputs.compressor_states)
  bits = jnp.where(fires, jnp.int32(32 * g.shape[-1]), out.bits)
  return (out._replace(bits=bits), states), {'y': g}


def tpc_v4(inputs: Inputs, *, state):
  """3PC v4: b = Q-hat + C2(g - Q-hat) with C2 the second slot (top_k_b),
  then Q = b + C(g - b); both sent, their bits added."""
  g = inputs.grad_P
  first = inputs.compress_b(g, inputs.qhat_P)
  out, states = inputs.compress(g, first.value_P, inputs.compressor_states)
  return (out._replace(bits=out.bits + first.bits), states), {'y': g}


def slot_count(hyper, num_params: int) -> jax.Array:
  """k of the compressor slot: randk's count where it holds randk, else
  top_k's (int32)."""
  k = jnp.where(hyper.compressor == compressors_lib.index('randk'),
                hyper.params['randk']['k'], hyper.params['top_k']['k'])
  return compressors_lib.top_k_count(k, num_params)


def coin_probability(hyper, p, num_params: int) -> jax.Array:
  """MARINA's p: the parameter, or where it is 0, k / P with k the
  compressor slot's count (`slot_count`)."""
  ratio = slot_count(hyper, num_params).astype(p.dtype) / num_params
  return jnp.where(p > 0, p, ratio)


def _omega(hyper, dtype, num_params: int) -> jax.Array:
  """omega = P / k - 1 of Rand-K with the slot's k."""
  return num_params / slot_count(hyper, num_params).astype(dtype) - 1


def _dasha_a(inputs: Inputs, params) -> jax.Array:
  """DASHA's a: the parameter, or where it is 0, 1 / (2 omega + 1) with
  omega = P / k - 1 of the slot's Rand-K."""
  g = inputs.grad_P
  omega = _omega(inputs.hyper, g.dtype, g.shape[-1])
  a = params['a'].astype(g.dtype)
  return jnp.where(a > 0, a, 1 / (2 * omega + 1))


def dasha(inputs: Inputs, *, params, state):
  """DASHA (Tyurin, Richtarik, ICLR 2023): c = C(g - h - a (Q-hat - h)),
  Q = Q-hat + c (c sent), h <- g; a = 1 / (2 omega + 1) where the
  parameter is 0, omega = P / k - 1."""
  g, qhat, h = inputs.grad_P, inputs.qhat_P, state['h']
  a = _dasha_a(inputs, params)
  c, states = _compressed(inputs.compress, g - h - a * (qhat - h),
                          inputs.compressor_states)
  return (c._replace(value_P=qhat + c.value_P), states), {'h': g}


def _diana_init(num_params, dtype, *, theta_P):
  del theta_P
  return {'h': jnp.zeros((num_params,), dtype),
          'started': jnp.zeros((), bool)}


def diana(inputs: Inputs, *, params, state):
  """DIANA's shift (EF21-P + DIANA, Gruntkowska, Tyurin, Richtarik 2023):
  m = Q(g - h) sent, Q = h + m (the server's H + sum m is the sum of
  these), h <- h + beta m; beta = 1 / (omega + 1) where the parameter is 0.
  With the warm start, the first round sets h = g (the upload is g)."""
  g, h = inputs.grad_P, state['h']
  omega = _omega(inputs.hyper, g.dtype, g.shape[-1])
  beta = params['beta'].astype(g.dtype)
  beta = jnp.where(beta > 0, beta, 1 / (omega + 1))
  m, states = _compressed(inputs.compress, g - h, inputs.compressor_states)
  first = inputs.hyper.warm_start & ~state['started']
  new_h = jnp.where(first, g, h + beta * m.value_P)
  return ((m._replace(value_P=h + m.value_P), states),
          {'h': new_h, 'started': jnp.ones((), bool)})


def second_gradient(fn: Callable) -> Callable:
  """Marks an estimator fn that takes a second gradient a round
  (`Inputs.gradient_at`): the round counts 2 for its workers."""
  fn.second_gradient = True
  return fn


def takes_second_gradient(part: parts_lib.Part) -> bool:
  """Whether the estimator takes a second gradient (`second_gradient`)."""
  return bool(getattr(part.fn, 'second_gradient', False))


def _mvr_init(num_params, dtype, *, theta_P):
  return {'h': jnp.zeros((num_params,), dtype),
          'theta_prev': jnp.asarray(theta_P, dtype),
          'started': jnp.zeros((), bool)}


@second_gradient
def dasha_mvr(inputs: Inputs, *, params, state):
  """DASHA-MVR (Tyurin, Richtarik, ICLR 2023, Algorithm 1 with the MVR
  estimator; Flower's StochasticDashaClient): on the round's minibatch xi,
  h' = grad f(theta^k; xi) + (1 - b)(h - grad f(theta^{k-1}; xi)) (both on
  the same xi), c = C(h' - h - a (Q-hat - h)), Q = Q-hat + c, h <- h';
  theta^{k-1} is the worker's own last parameters. With the warm start the
  first round sets h = g. a = 1 / (2 omega + 1) where the parameter is 0."""
  if inputs.gradient_at is None:
    raise ValueError('estimator \'dasha_mvr\' needs the round\'s sample '
                     '(Inputs.gradient_at): the library\'s full-batch or '
                     'minibatch gradient parts give it')
  g, qhat, h = inputs.grad_P, inputs.qhat_P, state['h']
  a = _dasha_a(inputs, params)
  b = params['b'].astype(g.dtype)
  first = inputs.hyper.warm_start & ~state['started']
  new_h = jnp.where(first, g, g + (1 - b) * (
      h - inputs.gradient_at(state['theta_prev'])))
  c, states = _compressed(inputs.compress, new_h - h - a * (qhat - h),
                          inputs.compressor_states)
  return ((c._replace(value_P=qhat + c.value_P), states),
          {'h': new_h, 'theta_prev': inputs.theta_P,
           'started': jnp.ones((), bool)})


def marina(inputs: Inputs, *, params, state):
  """MARINA (and 3PC v5): on the round's coin c_k = [u_k < p] every
  worker sends g (32 p bits), else Q = Q-hat + C(g - y) (C's bits)."""
  g = inputs.grad_P
  p = coin_probability(inputs.hyper, params['p'].astype(g.dtype), g.shape[-1])
  full = inputs.coin < p
  c, states = _compressed(inputs.compress, g - state['y'],
                          inputs.compressor_states)
  value = jnp.where(full, g, inputs.qhat_P + c.value_P)
  bits = jnp.where(full, jnp.int32(32 * g.shape[-1]), c.bits)
  return (compressors_lib.Compressed(value, bits), states), {'y': g}


# Their wires (`codecs.Uplink`: one fn for the worker's and the server's
# halves, `laq_jax.deploy.uplink`).

def _full_round(io, params) -> bool:
  """MARINA's c_k = [u_k < p] as the estimator computes it (float32)."""
  p = coin_probability(io.hyper, jnp.asarray(params['p'], jnp.float32),
                       io.num_params)
  return bool(jnp.asarray(io.coin, jnp.float32) < p)


def _marina_uplink(io, *, params):
  if _full_round(io, params):
    return io.send('identity', io.grad, None)
  return io.qhat + io.send('compressor', lambda: io.grad() - io.state['y'],
                           None)


def _tpc_v2_uplink(io, *, params):
  del params
  q = io.send('compressor_b', lambda: io.grad() - io.state['y'], None)
  return io.send('compressor', io.grad, io.qhat + q)


def _tpc_v4_uplink(io, *, params):
  del params
  b = io.send('compressor_b', io.grad, io.qhat)
  return io.send('compressor', io.grad, b)


def _dasha_uplink(io, *, params):
  """c = C(h' - h - a (Qhat - h)) against 0, Q = Qhat + c: h' = g for
  DASHA, DASHA-MVR's momentum estimate (the state after the round)."""
  omega = _omega(io.hyper, jnp.float32, io.num_params)
  a = jnp.asarray(params['a'], jnp.float32)
  a = np.float32(jnp.where(a > 0, a, 1 / (2 * omega + 1)))

  def x():
    h = np.asarray(io.state['h'], np.float32)
    new_h = np.asarray(io.new_state['h'], np.float32)
    return new_h - h - a * (io.qhat - h)

  return io.qhat + io.send('compressor', x, None)


_ZETA = parts_lib.Param(
    'zeta', 1.0, check=lambda a: a >= 0, allowed='a finite number >= 0',
    doc='zeta of the LAG test inside 3PC v3')
_P = parts_lib.Param(
    'p', 0.0, check=lambda a: (a >= 0) & (a <= 1),
    allowed='a number in [0, 1] (0: k / P)',
    doc='p, the probability of a full-gradient round (0: k / P)')

REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry(
    'estimator', [
        ('direct', parts_lib.estimator(
            'direct', reference, doc='Q = C(g): the gradient compressed')),
        ('innovation', parts_lib.estimator(
            'innovation', reference,
            doc='Q = Qhat + C(g - Qhat): the innovation compressed')),
        ('tpc_v1', parts_lib.estimator(
            'tpc_v1', tpc_v1, init=_y_init, opt_in=True,
            doc='3PC v1: y + C(g - y) (idealized)')),
        ('tpc_v2', parts_lib.estimator(
            'tpc_v2', tpc_v2, init=_y_init, opt_in=True,
            wire=codecs.Uplink(_tpc_v2_uplink,
                               slots=('compressor_b', 'compressor')),
            doc='3PC v2: b = Qhat + Q(g - y), b + C(g - b)')),
        ('tpc_v3', parts_lib.estimator(
            'tpc_v3', tpc_v3, init=_y_init, params=[_ZETA], opt_in=True,
            doc='3PC v3: LAG\'s full gradient, else an EF21 step')),
        ('tpc_v4', parts_lib.estimator(
            'tpc_v4', tpc_v4, init=_y_init, opt_in=True,
            wire=codecs.Uplink(_tpc_v4_uplink,
                               slots=('compressor_b', 'compressor')),
            doc='3PC v4: b = Qhat + C2(g - Qhat), b + C(g - b)')),
        ('marina', parts_lib.estimator(
            'marina', marina, init=_y_init, params=[_P], opt_in=True,
            wire=codecs.Uplink(_marina_uplink,
                               slots=('identity', 'compressor')),
            doc='MARINA / 3PC v5: g on the coin, else Qhat + C(g - y)')),
        ('dasha', parts_lib.estimator(
            'dasha', dasha, init=_h_init, opt_in=True,
            wire=codecs.Uplink(_dasha_uplink), params=[
                parts_lib.Param(
                    'a', 0.0, check=lambda a: (a >= 0) & (a <= 1),
                    allowed='a number in [0, 1] (0: 1 / (2 omega + 1))',
                    doc='a, the momentum of DASHA\'s estimate')],
            doc='DASHA: Qhat + C(g - h - a (Qhat - h)), h <- g')),
        ('dasha_mvr', parts_lib.estimator(
            'dasha_mvr', dasha_mvr, init=_mvr_init, opt_in=True,
            wire=codecs.Uplink(_dasha_uplink), params=[
                parts_lib.Param(
                    'a', 0.0, check=lambda a: (a >= 0) & (a <= 1),
                    allowed='a number in [0, 1] (0: 1 / (2 omega + 1))',
                    doc='a, the momentum of DASHA\'s estimate'),
                parts_lib.Param(
                    'b', 0.1, check=lambda a: (a > 0) & (a <= 1),
                    allowed='a number in (0, 1]',
                    doc='b, the MVR momentum (1: DASHA on minibatch '
                    'gradients)')],
            doc='DASHA-MVR: DASHA on the momentum variance-reduced h')),
        ('diana', parts_lib.estimator(
            'diana', diana, init=_diana_init, opt_in=True, params=[
                parts_lib.Param(
                    'beta', 0.0, check=lambda a: (a >= 0) & (a <= 1),
                    allowed='a number in [0, 1] (0: 1 / (omega + 1))',
                    doc='beta, the step of DIANA\'s shift h')],
            doc='DIANA: h + Q(g - h), h <- h + beta Q(g - h)')),
    ])


def index(name: str) -> int:
  """The position of `name` in ESTIMATORS (what `Hyper.estimator` holds)."""
  return REGISTRY.index(name)


# ESTIMATORS: the registry's names (an estimator registered later is in it).
__getattr__ = registry.names_attribute(__name__, ESTIMATORS=REGISTRY)


def check_names(names: Sequence[str]) -> tuple[str, ...]:
  """`names` as a tuple of known estimators, in ESTIMATORS order."""
  return REGISTRY.check_names(names)


def init_states(parts: Sequence[parts_lib.Part], num_params: int, dtype,
                theta_P=None) -> dict[str, Any]:
  """{name: one worker's state} of the stateful estimators among `parts`."""
  return {p.name: parts_lib.init_state(p, num_params, dtype, theta_P)
          for p in parts if p.stateful}


def estimate(grad_P, qhat_P, key, hyper, parts: Sequence[parts_lib.Part],
             compressors: Sequence[parts_lib.Part], states: dict,
             compressors_b: Sequence[parts_lib.Part] = (), coin=None,
             gradient_at=None, theta_P=None
             ) -> tuple[compressors_lib.Compressed, dict]:
  """The candidate upload of ESTIMATORS[hyper.estimator] among `parts`
  (static; one outside them selects the first: `RunSpec.check_hyper`
  refuses it), with the compressor slot over `compressors`.

  Args:
    grad_P, qhat_P, key, hyper: as `Inputs`.
    parts: the estimators compiled in.
    compressors: the compressors compiled in.
    states: {name: this worker's state} of the stateful compressors and
      estimators among them.
    compressors_b: the compressors `hyper.compressor_b` may pick (stateless;
      traced only where an estimator calls `Inputs.compress_b`).
    coin: the round's uniform u_k (`Inputs.coin`).
    gradient_at, theta_P: as `Inputs` (None: none).

  Returns:
    (a `Compressed`, the states: the compressors' as the estimator's
    compress calls left them, the chosen estimator's updated).
  """
  for part in compressors_b:
    if part.stateful:
      raise ValueError(f'compressor_b {part.name!r} keeps state: the second '
                       'compressor slot takes stateless compressors')

  def branch(part, grad_P, qhat_P, key, hyper, states, coin):
    def compress(x_P, ref_P, compressor_states):
      return compressors_lib.compress(x_P, ref_P, key, hyper, compressors,
                                      compressor_states)

    def compress_b(x_P, ref_P):
      out, _ = compressors_lib.compress(
          x_P, ref_P, jax.random.fold_in(key, 1),
          hyper._replace(compressor=hyper.compressor_b), compressors_b, {})
      return out

    compressor_states = {p.name: states[p.name] for p in compressors
                         if p.stateful}
    inputs = Inputs(grad_P, qhat_P, key, hyper, compress, compressor_states,
                    compress_b if compressors_b else None, coin, gradient_at,
                    theta_P)
    (out, new_compressor_states), new = part.call(
        inputs, params=parts_lib.own_params(hyper, part),
        state=states.get(part.name))
    states = {**states, **new_compressor_states}
    if part.stateful:
      states = {**states, part.name: new}
    return out, states

  return parts_lib.switch_merged(hyper.estimator, parts, REGISTRY, branch,
                                 grad_P, qhat_P, key, hyper, states, coin)
