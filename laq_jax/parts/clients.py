"""The client part: what a participant computes in a round (local work).

    local = clients.client('local', lambda p: optax.sgd(p['lr']),
                           params=[steps(), lr(0.1), mu()])

`gradient` (the default) is today's round: one gradient at the parameters
the worker holds (full shard or minibatch), uploaded through the
compressor and trigger parts. Every other client part runs K local steps
of a client optimizer (an optax GradientTransformation, fresh each round)
from those parameters, thetahat^k, on its own minibatches (keys (seed,
step, worker, local step): the first is the minibatch `gradient` draws),
and uploads the model change Delta_m = thetahat^k - theta_m^K through the
SAME compressor and trigger parts (docs/algorithm.md, "Local work").

A client part's parameters are arrays of the Hyper like every part's
(`hyper.params['local']['steps']`, `local.steps` in grids): K, the client
step eta_l and FedProx's mu are sweepable data; K has no static maximum
(the local loop is a `lax.while_loop` on it).

Call convention: fn(params) -> optax.GradientTransformation, the client
optimizer, with `params` the part's parameter arrays; the local stage reads
`steps` (K, required), `lr` (eta_l, the optimizer's step: SCAFFOLD's
control variate divides by it) and `mu` (the proximal term, optional). A
stateful client part (one with an `init`) keeps control variates, as
SCAFFOLD's option II (Karimireddy et al. 2020): c_m per worker
(`RuleState.parts_M[name]`), c on the server (`RuleState.server[name]`),
the local gradient corrected by c - c_m, c_m+ = c_m - c + Delta_m / (K
eta_l) uploaded as Delta c_m (32 p bits beside Delta_m's) and c +=
sum_S Delta c_m / M broadcast (32 p bits more).

FedNova's part (`fednova`, opt-in) draws each client's work per round,
tau_m = E_m ceil(n_m / B) (`local_steps`), and uploads its change
normalized by its work, Delta_m / ||a_m||_1 (`normalizer`), with
||a_m||_1 beside it (32 bits); the server steps tau_eff = sum_S w_m
||a_m||_1 times the weighted mean of the normalized changes
(docs/algorithm.md, "After LAQ").
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import optax

from laq_jax import parts as parts_lib
from laq_jax import registry

_P = parts_lib.Param


# K beyond this is a typo, not a setting: a round of K minibatch steps per
# client at 10**9 ran for minutes without a line (every round computes K).
MAX_STEPS = 10_000


def steps(default: int = 1) -> parts_lib.Param:
  """K, the local steps of a round (1..MAX_STEPS)."""
  return _P('steps', default, 'int',
            check=lambda a: (a >= 1) & (a <= MAX_STEPS),
            allowed=f'an integer in 1..{MAX_STEPS:,}',
            doc='K, local steps per round')


def lr(default: float = 0.1) -> parts_lib.Param:
  """eta_l, the client optimizer's step."""
  return _P('lr', default, check=lambda a: a > 0, allowed='a finite number > 0',
            doc='eta_l, the client step (on the mean loss of a minibatch)')


def mu(default: float = 0.0) -> parts_lib.Param:
  """FedProx's proximal weight."""
  return _P('mu', default, check=lambda a: a >= 0,
            allowed='a finite number >= 0',
            doc='mu, FedProx\'s proximal term mu/2 ||theta - thetahat||^2')


def client(name: str, fn: Callable, *, params: Iterable[parts_lib.Param] = (),
           init: Callable | None = None, doc: str = '',
           opt_in: bool = False, after: Callable | None = None
           ) -> parts_lib.Part:
  """A client part (register it in `clients.REGISTRY`); see the module
  docstring for `fn`, a stateful part's control variates and `after`."""
  params = tuple(params)
  names = [p.name for p in params]
  if fn is not _gradient and not (('steps' in names or 'p' in names)
                                  and 'lr' in names):
    raise ValueError(f'client {name!r} declares {names}: a client part needs '
                     'the parameters steps (K) and lr (eta_l) '
                     '(laq_jax.clients.steps(), lr())')
  return parts_lib.Part('client', name, fn, params, init, doc, opt_in,
                        after=after)


def _gradient(params=None):
  """No local work: the marker of the `gradient` part (never called)."""
  raise TypeError('the gradient client runs no client optimizer')


def is_local(part: parts_lib.Part) -> bool:
  """Whether `part` runs local steps (every client part but `gradient`)."""
  return part.fn is not _gradient


def work(part: parts_lib.Part, params, anchor_P, g0_P,
         grad_at: Callable, own_P=None, control_P=None, num_steps=None,
         state_P=None):
  """One client's local work in a round: K = params['steps'] steps (or
  `num_steps`, this client's own: `local_steps`) of the
  part's client optimizer from thetahat^k = `anchor_P` on the local
  objective f_m + mu/2 ||theta - thetahat||^2 (+ <c - c_m, theta> with
  control variates); step 0's gradient is `g0_P`, step j's
  `grad_at(theta_P, j)` (the minibatch keyed by j).

  Returns (Delta_m = thetahat - theta_m^K, K, c_m+ or None): with a
  stateful part, `own_P` (c_m) and `control_P` (c) correct the gradient
  and c_m+ = c_m - c + Delta_m / (K eta_l) (SCAFFOLD's option II). A
  part with an after-step update (`Part.after`) gets its state `state_P`
  in its optimizer instead, `part.fn(params, state_P)`."""
  tx = part.fn(params) if state_P is None else part.fn(params, state_P)
  num_steps = params['steps'] if num_steps is None else num_steps
  mu = params.get('mu')
  correction_P = None if own_P is None else control_P - own_P

  def local_step(theta_P, opt_state, g_P):
    if mu is not None:
      g_P = g_P + mu * (theta_P - anchor_P)
    if correction_P is not None:
      g_P = g_P + correction_P
    updates, opt_state = tx.update(g_P, opt_state, theta_P)
    return optax.apply_updates(theta_P, updates), opt_state

  def body(j, carry):
    theta_P, opt_state = carry
    return local_step(theta_P, opt_state, grad_at(theta_P, j))

  theta_P, _ = jax.lax.fori_loop(
      1, num_steps, body, local_step(anchor_P, tx.init(anchor_P), g0_P))
  delta_P = anchor_P - theta_P
  if own_P is None:
    return delta_P, num_steps, None
  return delta_P, num_steps, own_P - control_P + delta_P / (
      num_steps.astype(delta_P.dtype) * params['lr'])


MAX_EPOCHS = 1_000


def _epochs(name: str, doc: str) -> parts_lib.Param:
  return _P(name, 0, 'int', check=lambda a: (a >= 0) & (a <= MAX_EPOCHS),
            allowed=f'an integer in 0..{MAX_EPOCHS:,}', doc=doc)


def heterogeneous(part: parts_lib.Part) -> bool:
  """Whether the part draws each client's work per round (it declares
  `epochs_min` and `epochs_max`: FedNova's heterogeneous E_m)."""
  return {'epochs_min', 'epochs_max'} <= set(part.param_names)


def normalizes(part: parts_lib.Part) -> bool:
  """Whether the part may upload its change normalized by its work
  (it declares `normalize`: FedNova's Delta_m / ||a_m||_1)."""
  return 'normalize' in part.param_names


def check_epochs(name: str, params) -> None:
  """Refuses E_max below E_min (where E_min > 0) in the part's parameter
  values (a grid's too), naming both; traced values (inside a jit) pass
  unchecked."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  try:
    e_min, e_max = (np.asarray(params['epochs_min']),
                    np.asarray(params['epochs_max']))
  except jax.errors.TracerArrayConversionError:
    return
  if np.any((e_min > 0) & (e_max < e_min)):
    raise ValueError(
        f'{name}.epochs_max={e_max.tolist()} is not allowed with '
        f'{name}.epochs_min={e_min.tolist()}: it must be at least epochs_min '
        '(E_m is drawn in epochs_min..epochs_max; epochs_min 0 runs K = '
        'steps for every client)')


def check_work(given) -> None:
  """`check_epochs` for every registered client part that draws work, from
  `given` ({'part.param': value}: a preset's and the caller's dotted
  parameters; a part's default where absent)."""
  for part in map(REGISTRY.get, REGISTRY.names):
    if heterogeneous(part):
      check_epochs(part.name, {
          n: given.get(f'{part.name}.{n}', part.param(n).default)
          for n in ('epochs_min', 'epochs_max')})


def draws_coin(part: parts_lib.Part) -> bool:
  """Whether the part draws the round's K from the shared coin (it
  declares `p` and `k_cap`: Scaffnew's K_k ~ Geometric(p))."""
  return {'p', 'k_cap'} <= set(part.param_names)


def geometric_steps(params, u):
  """K_k = 1 + floor(ln U / ln(1 - p)) with U = 1 - u in (0, 1],
  Geometric(p) on {1, 2, ...}, from the round's shared uniform u in [0, 1)
  (`randomness.round_coin`; after-laq.md section 0; p = 1: K = 1), at
  most `k_cap` where that is > 0 and at most MAX_STEPS (the tail beyond it
  has mass (1 - p)^MAX_STEPS). int32."""
  p = jnp.asarray(params['p'], u.dtype)
  k = 1 + jnp.floor(jnp.log1p(-u) / jnp.log1p(-p))
  cap = jnp.asarray(params['k_cap'], u.dtype)
  k = jnp.where(cap > 0, jnp.minimum(k, cap), k)
  return jnp.clip(k, 1, MAX_STEPS).astype(jnp.int32)


def add_constant(c_P) -> optax.GradientTransformation:
  """g -> g + c_P (no state): a correction fixed for the round."""
  return optax.GradientTransformation(
      lambda params: optax.EmptyState(),
      lambda g, state, params=None: (g + c_P, state))


def scaffnew_optimizer(params, h_P) -> optax.GradientTransformation:
  """Scaffnew's local step y <- y - gamma (grad f_m(y) - h_m)."""
  return optax.chain(add_constant(-h_P), optax.sgd(params['lr']))


def scaffnew_after(params, own_P, local_P, theta_P, new_theta_P):
  """Scaffnew's control step (Mishchenko et al. 2022, Algorithm 1 with
  the prox the mean): h_m <- h_m + (p / gamma) (theta^{k+1} - y_m), y_m
  the client's last local iterate."""
  del theta_P
  p = jnp.asarray(params['p'], own_P.dtype)
  return own_P + p / jnp.asarray(params['lr'], own_P.dtype) * (
      new_theta_P - local_P)


def feddyn_optimizer(params, nu_P) -> optax.GradientTransformation:
  """FedDyn's local step on f_m(y) + alpha <nu_m, y> + alpha/2 ||y -
  theta^k||^2: y <- y - eta_l (grad f_m(y) + alpha (nu_m + y - theta^k))
  (Acar et al. 2021, the authors' code's form); theta^k is the state its
  init keeps."""
  alpha = params['alpha']
  dynamic = optax.GradientTransformation(
      lambda theta_P: theta_P,
      lambda g, anchor_P, params=None: (
          g + alpha * (nu_P + params - anchor_P), anchor_P))
  return optax.chain(dynamic, optax.sgd(params['lr']))


def feddyn_after(params, own_P, local_P, theta_P, new_theta_P):
  """FedDyn's state after the round: nu_m <- nu_m - Delta_m = nu_m + y_m
  - theta^k (the paper's grad L_m is -alpha nu_m)."""
  del params, new_theta_P
  return own_P + (local_P - theta_P)


def local_steps(params, u, count, batch_size: int):
  """tau_m, a client's local steps this round: E_m ceil(n_m / B) with
  E_m = E_min + floor(u (E_max - E_min + 1)) epochs (u: the client's
  `randomness.local_work_uniform`; E_max below E_min is refused by
  `check_epochs` when the Hyper is made), or params['steps'] (K) where
  E_min is 0. int32.

  `count` is the client's sample count n_m, `batch_size` B (the whole
  client when it holds fewer)."""
  e_min, e_max = params['epochs_min'], params['epochs_max']
  span = jnp.maximum(e_max - e_min + 1, 1)
  epochs = e_min + jnp.minimum(
      jnp.floor(u * span.astype(u.dtype)).astype(jnp.int32), span - 1)
  count = jnp.asarray(count, jnp.int32)
  per_epoch = (count + batch_size - 1) // batch_size
  return jnp.where(e_min > 0, epochs * jnp.maximum(per_epoch, 1),
                   params['steps']).astype(jnp.int32)


def normalizer(params, num_steps, dtype):
  """||a_m||_1, FedNova's local normalizing factor (Wang et al. 2020): the
  authors' recurrence over the tau local steps (JYWa/FedNova
  distoptim/FedNova.py:151-162): tau for client SGD; sum_{j=1..tau} (1 -
  rho^j) / (1 - rho) with momentum rho; (1 - (1 - eta_l mu)^tau) / (eta_l
  mu) with the proximal term; both at once as the code combines them."""
  rho = jnp.asarray(params.get('momentum', 0.0), dtype)
  eta_mu = jnp.asarray(params['lr'], dtype) * jnp.asarray(
      params.get('mu', 0.0), dtype)

  def step(_, carry):
    counter, vec = carry
    counter = jnp.where(rho != 0, counter * rho + 1, counter)
    vec = jnp.where(rho != 0, vec + counter, vec)
    vec = jnp.where(eta_mu != 0, vec * (1 - eta_mu) + 1, vec)
    vec = jnp.where((rho == 0) & (eta_mu == 0), vec + 1, vec)
    return counter, vec

  zero = jnp.zeros((), dtype)
  return jax.lax.fori_loop(0, num_steps, step, (zero, zero))[1]


def _control_init(num_params, dtype):
  return jnp.zeros((num_params,), dtype)


REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry('client', [
    ('gradient', parts_lib.Part(
        'client', 'gradient', _gradient,
        doc='one gradient at the parameters held (FedSGD; every preset of '
        'the lazy family)')),
    ('local', client(
        'local', lambda p: optax.sgd(p['lr']), params=[steps(), lr(), mu()],
        doc='K steps of client SGD (FedAvg, McMahan et al. 2017); mu > 0: '
        'FedProx (Li et al. 2020)')),
    ('local_momentum', client(
        'local_momentum',
        lambda p: optax.sgd(p['lr'], momentum=p['momentum']),
        params=[steps(), lr(), mu(),
                _P('momentum', 0.9, check=lambda a: (a >= 0) & (a < 1),
                   allowed='a number in [0, 1)',
                   doc='the client optimizer\'s heavy-ball momentum, reset '
                   'every round')],
        doc='K steps of client SGD with momentum (optax.sgd)')),
    ('scaffold', client(
        'scaffold', lambda p: optax.sgd(p['lr']), params=[steps(), lr()],
        init=_control_init,
        doc='K steps of client SGD corrected by control variates '
        '(SCAFFOLD option II, Karimireddy et al. 2020)')),
    ('fednova', client(
        'fednova', lambda p: optax.sgd(p['lr'], momentum=p['momentum']),
        params=[steps(), lr(0.05), mu(),
                _P('momentum', 0.0, check=lambda a: (a >= 0) & (a < 1),
                   allowed='a number in [0, 1)',
                   doc='rho, the client\'s heavy-ball momentum, reset every '
                   'round'),
                _epochs('epochs_min', 'E_min, the fewest epochs a client '
                        'runs in a round (0: K = steps for every client)'),
                _epochs('epochs_max', 'E_max, the most epochs (drawn '
                        'uniformly in E_min..E_max per client and round)'),
                _P('normalize', 1, 'int', check=lambda a: (a == 0) | (a == 1),
                   allowed='0 or 1',
                   doc='1: upload Delta_m / ||a_m||_1 and step tau_eff times '
                   'their mean (FedNova); 0: Delta_m (FedAvg with the same '
                   'work)')],
        opt_in=True,
        doc='FedNova (Wang et al. 2020): tau_m local steps of client SGD '
        '(momentum, prox optional), E_m epochs drawn per client, the '
        'change normalized by its work')),
    ('scaffnew', client(
        'scaffnew', scaffnew_optimizer,
        params=[lr(0.1),
                _P('p', 0.1, check=lambda a: (a > 0) & (a <= 1),
                   allowed='a number in (0, 1]',
                   doc='p, the probability a local step ends the round (K_k '
                   '~ Geometric(p), one draw shared by every client)'),
                _P('k_cap', 0, 'int',
                   check=lambda a: (a >= 0) & (a <= MAX_STEPS),
                   allowed=f'an integer in 0..{MAX_STEPS:,}',
                   doc='the most local steps a round runs (0: none but '
                   f'{MAX_STEPS:,}; the cut tail has mass (1 - p)^k_cap)')],
        init=_control_init, after=scaffnew_after, opt_in=True,
        doc='Scaffnew / ProxSkip (Mishchenko et al. 2022): K_k ~ Geom(p) '
        'steps of gradient descent corrected by -h_m, h_m moved after the '
        'server\'s mean')),
    ('feddyn', client(
        'feddyn', feddyn_optimizer,
        params=[steps(10), lr(0.1),
                _P('alpha', 0.01, check=lambda a: a > 0,
                   allowed='a finite number > 0',
                   doc='alpha, the dynamic regularizer\'s weight')],
        init=_control_init, after=feddyn_after, opt_in=True,
        doc='FedDyn (Acar et al. 2021): K steps of client SGD on the '
        'dynamically regularized loss, nu_m <- nu_m - Delta_m')),
])
__getattr__ = registry.names_attribute(__name__, CLIENTS=REGISTRY)


def index(name: str) -> int:
  """The position of `name` in CLIENTS (what `Hyper.client` holds)."""
  return REGISTRY.index(name)


def local_parts(parts: Sequence[parts_lib.Part]) -> tuple[parts_lib.Part, ...]:
  """The parts among `parts` that run local steps."""
  return tuple(p for p in parts if is_local(p))
