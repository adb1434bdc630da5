"""When a worker uploads: eagerly, by the LAG/LAQ rule, or by CLAG's.

LAG/LAQ (Chen et al. 2018; Sun et al. 2019, eq. 7-8): worker m uploads at
iteration k iff::

  ||Q - Qhat||^2 >= (1 / (alpha^2 M^2)) sum_d xi_d ||theta^{k+1-d} - theta^{k-d}||^2
                     + c_e (e + ehat) + c_0,
  or its staleness clock has reached tbar,

with xi_d = xi / D (unquantized LAG: e = ehat = 0). The authors' released
scripts weight the history xi / k while k <= D (the k parameter steps that
exist so far), then xi / D; `history_threshold` takes that as an option.

CLAG (Richtarik et al. 2022, the 3PC family): worker m uploads iff
||g - Qhat||^2 > zeta ||theta^k - theta^{k-1}||^2 (the uncompressed
innovation against the last parameter step); it has no staleness bound.

Under either rule a worker that has never uploaded uploads (its clock holds
NEVER_UPLOADED), which starts the server from every worker's upload at k = 0.

Each trigger is a function of one `Inputs` record returning a `Decision`,
and `REGISTRY` holds them by name; `Hyper.trigger` is an index into it, so
which trigger runs is data (a sweep over triggers is one program) and a user
adds one with `REGISTRY.register(name, part)` from their own code (a
`laq_jax.parts.Part`, which may own parameters and per-worker state).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from laq_jax import collectives
from laq_jax import parts as parts_lib
from laq_jax import registry

# A worker that has never uploaded counts as infinitely stale, so every worker
# uploads at k = 0 whatever the trigger says: the paper's Algorithm 1 (and
# LAG's) starts the server from every worker's initial upload, "Initialize
# theta^1, {Q_m(theta_hat_m^0)}". Starting the clocks at 0 instead (the
# authors' scripts, `Hyper.authors_code`) lets a worker skip at k = 0 when
# c_e * e exceeds ||Q||^2 (at b = 4 that silences the whole MLP for tbar
# steps). Any int32 tbar is <= this, and the forced upload resets the clock
# before it could overflow.
NEVER_UPLOADED = 2**31 - 1


def history_threshold(hist_D: jax.Array, step_size: jax.Array, xi: jax.Array,
                      num_workers: int, step=None,
                      authors_code=False, minibatch_scripts: bool = False
                      ) -> jax.Array:
  """(1 / (alpha^2 M^2)) * sum_d xi_d h_d: the part shared by all workers.

  Args:
    hist_D: h_d, d = 1..D ([0] newest; 0 for steps that do not exist yet).
    step_size: alpha.
    xi: the total history weight at this iteration (after its schedule).
    num_workers: M.
    step: k (needed with `authors_code`).
    authors_code: the authors' weights instead of xi_d = xi / D. Their
      full-batch scripts (LAQ.py, GD/lasterrtwiceDNN.py): xi / min(k, D) on
      all D steps. Their minibatch scripts (SLAQ.py, SGD/lasterrsgdDNN.py),
      with `minibatch_scripts`: a rolling buffer read at d = 1..D-1, so from
      k = D on xi / D on the D - 1 newest steps (the oldest is left out);
      for k < D the buffer is read at slots that are not filled yet, which
      leaves the steps j = D-k+1..k (none while k <= D/2), weighted xi / k.
    minibatch_scripts: (static) read `authors_code` as the minibatch scripts.
  """
  memory = hist_D.shape[-1]
  scale = jnp.square(step_size) * num_workers**2
  divisor = jnp.asarray(memory, hist_D.dtype)
  if step is not None:
    warm = jnp.clip(step, 1, memory).astype(hist_D.dtype)
    if not minibatch_scripts:
      divisor = jnp.where(authors_code, warm, divisor)
  shared = (xi / divisor) * jnp.sum(hist_D)
  if step is None or not minibatch_scripts:
    return shared / scale
  j = jnp.arange(1, memory + 1)
  window = jnp.where(step >= memory, j <= memory - 1,
                     (j >= memory - step + 1) & (j <= step))
  scripts = (xi / warm) * jnp.sum(jnp.where(window, hist_D,
                                            jnp.zeros_like(hist_D)))
  return jnp.where(authors_code, scripts, shared) / scale


def threshold(shared: jax.Array, error_sq: jax.Array, last_error_sq: jax.Array,
              err_weight: jax.Array, threshold_offset: jax.Array) -> jax.Array:
  """The LAG/LAQ rule's full right-hand side for one worker."""
  return shared + err_weight * (error_sq + last_error_sq) + threshold_offset


def should_upload(innovation_sq: jax.Array, rhs: jax.Array, clock: jax.Array,
                  max_staleness: jax.Array, lazy: jax.Array) -> jax.Array:
  """The LAG/LAQ rule: always when not lazy, else by the threshold or tbar."""
  return jnp.logical_not(lazy) | (innovation_sq >= rhs) | (clock >= max_staleness)


def clag_upload(raw_innovation_sq: jax.Array, zeta: jax.Array,
                last_step_sq: jax.Array, clock: jax.Array) -> jax.Array:
  """CLAG's rule: ||g - Qhat||^2 > zeta h_1, or the first upload."""
  return (raw_innovation_sq > zeta * last_step_sq) | (clock >= NEVER_UPLOADED)


class Inputs(NamedTuple):
  """What a trigger may read, for one worker at iteration k.

  Attributes:
    compressed_sq: ||Q - Qhat||^2, the compressed innovation.
    raw_sq: ||g - Qhat||^2, the uncompressed one.
    error_sq: e = ||Q - g||^2 of this step's compression.
    last_error_sq: ehat, that of the worker's last upload.
    shared: (1 / (alpha^2 M^2)) sum_d xi_d h_d, from `history_threshold`.
    last_step_sq: h_1 = ||theta^k - theta^{k-1}||^2.
    clock: t_m, consecutive skips (NEVER_UPLOADED before the first upload).
    hyper: the run's scalar Hyper (a trigger's own parameters live there).
    grad_P: g, the worker's gradient at theta^k (before compression).
    theta_P: theta^k, the parameters the worker holds.
    history_sum: sum_d h_d, the last D parameter steps (unweighted).
    gradient_at: theta_P -> the worker's gradient at other parameters on
      the SAME sample as g (its minibatch of this step, or its shard): the
      same-sample pair of LASG and CADA. None where the gradient part gives
      none (then a trigger that needs it is refused).
  """
  compressed_sq: jax.Array
  raw_sq: jax.Array
  error_sq: jax.Array
  last_error_sq: jax.Array
  shared: jax.Array
  last_step_sq: jax.Array
  clock: jax.Array
  hyper: object
  grad_P: jax.Array | None = None
  theta_P: jax.Array | None = None
  history_sum: jax.Array | None = None
  gradient_at: Any = None


class Decision(NamedTuple):
  """A trigger's answer: upload or not, and the two sides it compared
  (logged as the trace's innovation_M and threshold_M).

  Attributes:
    sent: upload (bool).
    lhs, rhs: the two sides compared.
    grads: the gradients the worker computed this step (None: 1); LASG's
      same-sample pair costs 2, a forced step 1.
    server_side: the server chose the worker BEFORE it computed (LASG-PS;
      None: False): a worker not chosen is idle this round (no download,
      no compute, no upload, not in the round's time), and a chosen one
      downloads theta^k (32 p bits) before it computes, in place of the
      broadcast after the step.
  """
  sent: jax.Array
  lhs: jax.Array
  rhs: jax.Array
  grads: jax.Array | None = None
  server_side: jax.Array | None = None


def _laq_rhs(i: Inputs) -> jax.Array:
  return threshold(i.shared, i.error_sq, i.last_error_sq,
                   i.hyper.err_weight, i.hyper.threshold_offset)


def eager(i: Inputs) -> Decision:
  """Always upload (GD, QGD, QSGD, ...); logs the LAG/LAQ sides anyway."""
  rhs = _laq_rhs(i)
  return Decision(jnp.ones_like(i.compressed_sq, dtype=bool),
                  i.compressed_sq, rhs)


def laq(i: Inputs) -> Decision:
  """LAG/LAQ (eq. 7-8): by the threshold, or after tbar skips."""
  rhs = _laq_rhs(i)
  return Decision(should_upload(i.compressed_sq, rhs, i.clock,
                                i.hyper.max_staleness, True),
                  i.compressed_sq, rhs)


def clag(i: Inputs, *, params=None) -> Decision:
  """CLAG: ||g - Qhat||^2 > zeta h_1, or the first upload."""
  zeta = (i.hyper.params['clag'] if params is None else params)['zeta']
  return Decision(clag_upload(i.raw_sq, zeta, i.last_step_sq, i.clock),
                  i.raw_sq, zeta * i.last_step_sq)


def tpc_lazy(i: Inputs, *, params, state) -> tuple[Decision, dict]:
  """The 3PC paper's LAG and CLAG test (Richtarik et al. 2022, Table 1):
  upload iff ||g - Qhat||^2 > zeta ||g - y||^2, y the worker's gradient at
  its last round (its state: y <- g every round it takes part in, upload
  or skip), or the first upload. Strict, as the authors' code; no
  staleness bound. `clag` is the suite's proxy with the parameter step in
  place of ||g - y||^2."""
  rhs = params['zeta'] * collectives.sum_sq(i.grad_P - state['y'])
  return (Decision(clag_upload(i.raw_sq, 1.0, rhs, i.clock), i.raw_sq, rhs),
          {'y': i.grad_P})


def _y_init(num_params, dtype, *, theta_P):
  del theta_P
  return {'y': jnp.zeros((num_params,), dtype)}


# ----------------------------------------------------------------------------
# LASG and CADA (Chen, Sun, Yin 2020; Chen, Guo, Sun, Yin 2021): the trigger
# compares two gradients on the SAME sample (`Inputs.gradient_at`), whose
# difference carries no sampling noise. Each keeps per-worker state, started
# from theta^0 (docs/algorithm.md, "LASG and CADA").

def _need_pair(i: Inputs, name: str):
  if i.gradient_at is None:
    raise ValueError(f'trigger {name!r} needs same-sample gradients '
                     '(Inputs.gradient_at): use the built-in full-batch or '
                     'minibatch gradient part, or one that returns a '
                     'laq_jax.loop.SameSample')


def _theta_init(num_params, dtype, *, theta_P):
  del num_params, dtype
  return {'theta_hat': jnp.asarray(theta_P)}


def _snapshot_init(num_params, dtype, *, theta_P):
  return {'snapshot': jnp.asarray(theta_P),
          'delta_hat': jnp.zeros((num_params,), dtype),
          'since': jnp.zeros((), jnp.int32)}


def _wk2(i: Inputs, state, rhs, name):
  """LASG-WK2: upload iff ||g - g(thetahat_m)||^2 >= rhs (both on this
  step's sample), or after tbar skips (forced: no second gradient);
  thetahat_m <- theta^k on upload."""
  _need_pair(i, name)
  forced = i.clock >= i.hyper.max_staleness
  lhs = collectives.sum_sq(i.grad_P - i.gradient_at(state['theta_hat']))
  sent = forced | (lhs >= rhs)
  theta_hat = jnp.where(sent, i.theta_P, state['theta_hat'])
  grads = jnp.where(forced, 1, 2).astype(jnp.int32)
  return Decision(sent, lhs, rhs, grads), {'theta_hat': theta_hat}


def _wk1(i: Inputs, state, rhs, name):
  """LASG-WK1: a snapshot thetatilde refreshed every tbar + 1 steps (the
  forced upload, no second gradient); between, with delta = g -
  g(thetatilde) on this step's sample, upload iff ||delta - deltahat_m||^2
  >= rhs, deltahat_m <- delta on upload (0 at a refresh). A trigger upload
  moves neither the snapshot nor its counter (the authors' code)."""
  _need_pair(i, name)
  since = state['since'] + 1
  refresh = since > i.hyper.max_staleness
  delta = i.grad_P - i.gradient_at(state['snapshot'])
  lhs = collectives.sum_sq(delta - state['delta_hat'])
  sent = refresh | (lhs >= rhs) | (i.clock >= NEVER_UPLOADED)
  new = {'snapshot': jnp.where(refresh, i.theta_P, state['snapshot']),
         'delta_hat': jnp.where(refresh, jnp.zeros_like(delta),
                                jnp.where(sent, delta, state['delta_hat'])),
         'since': jnp.where(refresh, 0, since).astype(jnp.int32)}
  grads = jnp.where(refresh, 1, 2).astype(jnp.int32)
  return Decision(sent, lhs, rhs, grads), new


def lasg_wk2(i: Inputs, *, state) -> tuple[Decision, dict]:
  """LASG-WK2 with the LAG/LAQ right-hand side (with LAQ's quantizer its
  error terms c_e (e + ehat) join it)."""
  return _wk2(i, state, _laq_rhs(i), 'lasg_wk2')


def lasg_wk1(i: Inputs, *, state) -> tuple[Decision, dict]:
  """LASG-WK1 with the LAG/LAQ right-hand side."""
  return _wk1(i, state, _laq_rhs(i), 'lasg_wk1')


def lasg_ps(i: Inputs, *, params, state) -> tuple[Decision, dict]:
  """LASG-PS: the SERVER selects worker m iff L ||theta^k - thetahat_m||^2
  >= rhs (the shared history term and c_0: it decides before the worker
  computes, so without this step's quantization error) or after tbar
  skips; only the selected download theta^k, compute one gradient and
  upload; thetahat_m <- theta^k then."""
  dist = collectives.sum_sq(i.theta_P - state['theta_hat'])
  lhs = params['L'] * dist
  rhs = i.shared + i.hyper.threshold_offset
  sent = (lhs >= rhs) | (i.clock >= i.hyper.max_staleness)
  theta_hat = jnp.where(sent, i.theta_P, state['theta_hat'])
  return (Decision(sent, lhs, rhs, sent.astype(jnp.int32),
                   jnp.ones_like(sent)), {'theta_hat': theta_hat})


def cada_wk2(i: Inputs, *, params, state) -> tuple[Decision, dict]:
  """CADA2: WK2's test against the absolute c * sum_d h_d."""
  return _wk2(i, state, params['c'] * i.history_sum, 'cada_wk2')


def cada_wk1(i: Inputs, *, params, state) -> tuple[Decision, dict]:
  """CADA1: WK1's test against the absolute c * sum_d h_d."""
  return _wk1(i, state, params['c'] * i.history_sum, 'cada_wk1')


_C = parts_lib.Param(
    'c', 0.05, check=lambda a: a >= 0, allowed='a finite number >= 0',
    doc='c, the absolute threshold per history term (the authors\' 5e-4 '
    'on gradients averaged over M workers is c = 5e-4 M^2 on the suite\'s '
    'per-worker means: 0.05 at M = 10)')

# Every trigger: a `laq_jax.parts.Part` (a plain function Inputs -> Decision
# registers as one without parameters or state).
REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry(
    'trigger', [
        ('eager', eager), ('laq', laq),
        ('clag', parts_lib.trigger(
            'clag', clag, params=[parts_lib.Param(
                'zeta', 20.0, check=lambda a: a >= 0,
                allowed='a finite number >= 0 (CLAG\'s trigger weight)',
                doc='zeta: upload iff ||g - Qhat||^2 > zeta h_1')],
            doc='CLAG (Richtarik et al. 2022)')),
        ('lasg_wk2', parts_lib.trigger(
            'lasg_wk2', lasg_wk2, init=_theta_init,
            doc='LASG-WK2 (Chen, Sun, Yin 2020)', opt_in=True)),
        ('lasg_wk1', parts_lib.trigger(
            'lasg_wk1', lasg_wk1, init=_snapshot_init,
            doc='LASG-WK1 (Chen, Sun, Yin 2020)', opt_in=True)),
        ('lasg_ps', parts_lib.trigger(
            'lasg_ps', lasg_ps, init=_theta_init, params=[parts_lib.Param(
                'L', 10.0, check=lambda a: a >= 0,
                allowed='a finite number >= 0',
                doc='L, the smoothness weight of the server\'s test (the '
                'authors\' 0.1 on averaged gradients is 0.1 M^2 here: 10 '
                'at M = 10, 40 at M = 20)')],
            doc='LASG-PS (Chen, Sun, Yin 2020): the server selects',
            opt_in=True)),
        ('cada_wk2', parts_lib.trigger(
            'cada_wk2', cada_wk2, init=_theta_init, params=[_C],
            doc='CADA2 (Chen, Guo, Sun, Yin 2021)', opt_in=True)),
        ('cada_wk1', parts_lib.trigger(
            'cada_wk1', cada_wk1, init=_snapshot_init, params=[_C],
            doc='CADA1 (Chen, Guo, Sun, Yin 2021)', opt_in=True)),
        ('tpc_lazy', parts_lib.trigger(
            'tpc_lazy', tpc_lazy, init=_y_init, params=[parts_lib.Param(
                'zeta', 1.0, check=lambda a: a >= 0,
                allowed='a finite number >= 0 (the 3PC LAG/CLAG weight)',
                doc='zeta: upload iff ||g - Qhat||^2 > zeta ||g - y||^2')],
            doc='the 3PC paper\'s LAG/CLAG test (Richtarik et al. 2022)',
            opt_in=True)),
    ])


def index(name: str) -> int:
  """The position of `name` in TRIGGERS (what `Hyper.trigger` holds)."""
  return REGISTRY.index(name)


# TRIGGERS: the registry's names (a trigger registered later is in it).
__getattr__ = registry.names_attribute(__name__, TRIGGERS=REGISTRY)


def init_states(parts: Sequence[parts_lib.Part], num_params: int, dtype,
                theta_P=None) -> dict[str, Any]:
  """{name: one worker's state} of the stateful triggers among `parts`
  (`theta_P`, theta^0, for an init that takes it)."""
  return {p.name: parts_lib.init_state(p, num_params, dtype, theta_P)
          for p in parts if p.stateful}


def decide(inputs: Inputs, parts: Sequence[parts_lib.Part],
           states: dict | None = None) -> tuple[Decision, dict]:
  """The decision of TRIGGERS[hyper.trigger] among the `parts` (static)
  compiled in (a trigger outside them selects the first: callers refuse
  it), and the states with the chosen trigger's updated. The Decision
  comes back with `grads` (int32) and `server_side` (bool) filled in."""
  states = dict(states or {})
  like = inputs.compressed_sq
  # A function is no operand of lax.switch: the branches close over it.
  gradient_at = inputs.gradient_at
  inputs = inputs._replace(gradient_at=None)

  def branch(part, inputs, states):
    inputs = inputs._replace(gradient_at=gradient_at)
    d, new = part.call(inputs, params=parts_lib.own_params(inputs.hyper, part),
                       state=states.get(part.name))
    # Under shard_map every branch of lax.switch must vary over the same
    # axes; adding a zero typed like the data costs nothing.
    zero = jnp.zeros_like(like)
    grads = jnp.int32(1) if d.grads is None else d.grads
    side = jnp.bool_(False) if d.server_side is None else d.server_side
    d = Decision(d.sent | (zero != zero), d.lhs + zero, d.rhs + zero,
                 jnp.asarray(grads, jnp.int32) + zero.astype(jnp.int32),
                 jnp.asarray(side, bool) | (zero != zero))
    if part.stateful:
      states = {**states, part.name: new}
    return d, states

  index = parts_lib.local_index(inputs.hyper.trigger, parts, REGISTRY)
  return parts_lib.switch(index, parts, branch, inputs, states)
