"""The server update: how the server steps with what it aggregated.

    theta^{k+1}, state = update(step_P, theta_P, hyper, parts, states)

`sgd` is the family's step, theta^{k+1} = theta^k - alpha * aggregate (the
LAQ paper's eq. 4), with no state. Any optax GradientTransformation is a
server part too (`optax_server`): its state (momentum, Adam's moments) lives
in the loop state and its hyperparameters are the part's own parameters,
arrays of the Hyper, so a sweep over them (or over servers) is one program.
The learning rate of every server is the Hyper's `step_size` as the round
hands it over (`rules.server_hyper`): alpha for gradient clients, eta_s
(`Hyper.server_lr`) for clients with local steps; the one the LAG/LAQ
trigger's threshold divides by.

Which server runs is data (`Hyper.server`, an index into `REGISTRY`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax

from laq_jax import collectives
from laq_jax import parts as parts_lib
from laq_jax import registry
from laq_jax.parts import compressors


def sgd(step_P, theta_P, hyper):
  """theta - alpha * step: today's step, bit for bit (no optax in the way)."""
  return theta_P - hyper.step_size * step_P


def optax_server(name: str, factory: Callable[..., optax.GradientTransformation],
                 params: Iterable[parts_lib.Param] = (), doc: str = '', *,
                 opt_in: bool = False, history: Callable | None = None
                 ) -> parts_lib.Part:
  """A server part from an optax factory.

  Args:
    name: the part's name.
    factory: `(learning_rate, **params) ->` an optax GradientTransformation,
      e.g. `lambda lr, momentum: optax.sgd(lr, momentum)`. It is called
      inside the compiled step with the parameters as arrays.
    params: the factory's keyword parameters (`laq_jax.parts.Param` values).
    doc: one line.
    opt_in: compiled in only where a point uses it (`laq_jax.parts.Part`).
    history: its entry in the triggers' history (`Part.history`; None: the
      moved distance).

  The optax state is kept as the tuple of its leaves (its structure comes
  from `factory(...).init`), so any transformation's state checkpoints and
  shards as plain arrays.
  """
  params = tuple(params)

  def transformation(hyper, own):
    return factory(hyper.step_size, **(own or {}))

  def init(theta_P, hyper, own):
    return tuple(jax.tree.leaves(transformation(hyper, own).init(theta_P)))

  def update(step_P, theta_P, hyper, *, state, params=None):
    tx = transformation(hyper, params)
    treedef = jax.tree.structure(jax.eval_shape(tx.init, theta_P))
    opt_state = jax.tree.unflatten(treedef, state)
    updates, opt_state = tx.update(step_P, opt_state, theta_P)
    return (optax.apply_updates(theta_P, updates),
            tuple(jax.tree.leaves(opt_state)))

  if not params:  # Part.call passes params= only to parts that declare them
    fn = lambda step_P, theta_P, hyper, *, state: update(
        step_P, theta_P, hyper, state=state)
  else:
    fn = update
  return parts_lib.Part('server', name, fn, params, init, doc, opt_in,
                        history=history)


def server(name: str, fn: Callable, *, params: Iterable[parts_lib.Param] = (),
           init: Callable | None = None, doc: str = '') -> parts_lib.Part:
  """A server part from a function (see `laq_jax.parts`)."""
  return parts_lib.Part('server', name, fn, tuple(params), init, doc)


class EF21BCState(NamedTuple):
  """`ef21bc_server`'s state: G, the compressed aggregate every worker
  holds a copy of, and whether the server has stepped (the warm start's
  round)."""
  g_P: jax.Array
  started: jax.Array


def ef21bc(step_P, theta_P, hyper, *, state):
  """EF21-BC's server (Fatkhullin et al. 2021, "EF21 with Bells &
  Whistles", Algorithm EF21-BC; the authors' ef21_bc.py): G <- G +
  C_M(agg - G), theta <- theta - alpha G, with C_M the compressor
  `top_k_down` (its own k) and agg the running sum of the workers' EF21
  estimates. It broadcasts C_M(agg - G) (the broadcast part `ef21bc`
  counts it). With the warm start its first round sets G = agg, sent in
  full. The sum form equals the paper's mean form (top-k is positively
  homogeneous)."""
  change = compressors.top_k(step_P, state.g_P, None, hyper,
                             params=hyper.params['top_k_down']).value_P
  first = hyper.warm_start & ~state.started
  g_P = jnp.where(first, step_P, change)
  return theta_P - hyper.step_size * g_P, EF21BCState(
      g_P, jnp.ones_like(state.started))


def _ef21bc_init(theta_P, hyper, own):
  del hyper, own
  return EF21BCState(jnp.zeros_like(theta_P), jnp.zeros((), bool))


class Round(NamedTuple):
  """What a server part that reads the round gets (`reads_round`).

  Attributes:
    sum_P: the sum of the round's participants' uploads (every client's
      without partial participation).
    count: how many took part in round k (int32).
    num_workers: M.
  """
  sum_P: jax.Array
  count: jax.Array
  num_workers: int


def reads_round(fn: Callable) -> Callable:
  """Marks a server fn that takes the round (a `Round`) as its fourth
  argument, after `step_P`, `theta_P` and `hyper`."""
  fn.reads_round = True
  return fn


def needs_round(part: parts_lib.Part) -> bool:
  """Whether the server part reads the round (`reads_round`)."""
  return bool(getattr(part.fn, 'reads_round', False))


@reads_round
def feddyn(step_P, theta_P, hyper, round_: Round, *, state):
  """FedDyn's server (Acar et al. 2021, the authors' code's form): N <- N -
  sum_S Delta_m (N = sum over every client of nu_m), theta^{k+1} = theta^k
  - eta_s mean_S Delta_m + N / M (the step is the participants' uniform
  mean; eta_s = 1 is the paper's). The paper's h is -(alpha / M) N."""
  n_P = state - round_.sum_P
  return (theta_P - hyper.step_size * step_P
          + n_P / jnp.asarray(round_.num_workers, n_P.dtype), n_P)


_unit = lambda a: (a >= 0) & (a < 1)
_pos = lambda a: a > 0
_P = parts_lib.Param


def _momentum(doc: str) -> list[parts_lib.Param]:
  return [_P('momentum', 0.9, check=_unit, allowed='a number in [0, 1)',
             doc=doc)]


def _moments(eps: float) -> list[parts_lib.Param]:
  """b1, b2, eps of the Adam family (eps: its default)."""
  return [_P('b1', 0.9, check=_unit, allowed='a number in [0, 1)',
             doc='beta_1, the first moment\'s decay'),
          _P('b2', 0.999, check=_unit, allowed='a number in [0, 1)',
             doc='beta_2, the second moment\'s decay'),
          _P('eps', eps, check=_pos, allowed='a finite number > 0',
             doc='epsilon, added to sqrt(v) (on the SUM of the uploads)')]


def cada_amsgrad(learning_rate, b1, b2, eps) -> optax.GradientTransformation:
  """CADA's server (Chen, Guo, Sun, Yin 2021; the authors' code): AMSGrad
  without bias correction, m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
  vhat <- max(vhat, v) from vhat = 0 (so vhat starts at the first v),
  theta <- theta - alpha m / (sqrt(vhat) + eps)."""
  return optax.amsgrad(learning_rate, b1=b1, b2=b2, eps=eps,
                       bias_correction_mu=False, bias_correction_nu=False)


def cada_amsgrad_typo(learning_rate, b1, b2, eps, stale_from, stale_to
                      ) -> optax.GradientTransformation:
  """`cada_amsgrad` as CADA's MNIST code runs it, typo included
  (ChrisYZZ/CADA-master, Python/MNIST code/utils_gpu.py:158,
  `update_params_adam` writes the first layer's bias maximum to a misspelt
  key, 'biast_v_hat1'): the coordinates [stale_from, stale_to) of the flat
  theta_P keep vhat = v_1, the first step's v, for ever; every other
  coordinate is `cada_amsgrad`'s, bit for bit (optax's own moment updates,
  the same state leaves). Opt-in, to reproduce the authors' saved runs; the
  suite's CADA does not copy it (docs/algorithm.md)."""
  inner = optax.scale_by_amsgrad(b1=b1, b2=b2, eps=eps,
                                 bias_correction_mu=False,
                                 bias_correction_nu=False)

  def update(g, state, params=None):
    del params
    mu = optax.tree.update_moment(g, state.mu, b1, 1)
    nu = optax.tree.update_moment_per_elem_norm(g, state.nu, b2, 2)
    i = jnp.arange(g.shape[-1])
    stale = (i >= stale_from) & (i < stale_to) & (state.count > 0)
    nu_max = jnp.where(stale, state.nu_max, jnp.maximum(state.nu_max, nu))
    updates = mu / (jnp.sqrt(nu_max + 0.0) + eps)  # optax's eps_root = 0
    return updates, state._replace(count=optax.safe_increment(state.count),
                                   mu=mu, nu=nu, nu_max=nu_max)

  return optax.chain(optax.GradientTransformation(inner.init, update),
                     optax.scale_by_learning_rate(learning_rate))


def _stale_range() -> list[parts_lib.Param]:
  """`cada_amsgrad_typo`'s range: the LASG CNN's conv1 bias by default
  (`laq_jax.flat_range(get_problem('lasg_cnn'), 'conv1/bias')`, tested;
  configs/lasg.py sets it from the model a sweep runs)."""
  nonneg = lambda a: a >= 0
  return [_P('stale_from', 0, 'int', check=nonneg, allowed='an integer >= 0',
             doc='the first flat coordinate whose vhat stays v_1'),
          _P('stale_to', 20, 'int', check=nonneg, allowed='an integer >= 0',
             doc='one past the last (stale_to <= stale_from: none)')]


def sgd_history(step_P, theta_P, new_theta_P, hyper):
  """||alpha agg||^2, the step SGD would take with the round's aggregate:
  the history entry CADA's MNIST code records (`utils_gpu.py:
  update_params_adam`'s diff), whatever its AMSGrad server moved."""
  del theta_P, new_theta_P
  return collectives.sum_sq(hyper.step_size * step_P)


class FedOptState(NamedTuple):
  """`fedopt`'s state: the first moment m and the second v (pytrees)."""
  m: Any
  v: Any


def fedopt(learning_rate, b1, b2, tau, *, yogi: bool = False
           ) -> optax.GradientTransformation:
  """FedAdam's / FedYogi's server (Reddi et al. 2021, Algorithm 2), on the
  aggregate pseudo-gradient g (the mean model change): m <- b1 m + (1 - b1)
  g; v <- b2 v + (1 - b2) g^2 (Adam) or v - (1 - b2) g^2 sign(v - g^2)
  (Yogi); theta <- theta - eta m / (sqrt(v) + tau). No bias correction; m
  starts at 0 and v at tau^2 (the paper's v_{-1} >= tau^2)."""
  def init(params):
    return FedOptState(jax.tree.map(jnp.zeros_like, params),
                       jax.tree.map(lambda p: jnp.full_like(p, tau ** 2),
                                    params))

  def update(g, state, params=None):
    del params
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, g)
    if yogi:
      v = jax.tree.map(lambda v, g: v - (1 - b2) * jnp.square(g) * jnp.sign(
          v - jnp.square(g)), state.v, g)
    else:
      v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g),
                       state.v, g)
    updates = jax.tree.map(lambda m, v: -learning_rate * m / (jnp.sqrt(v) + tau),
                           m, v)
    return updates, FedOptState(m, v)

  return optax.GradientTransformation(init, update)


def _fedopt_params() -> list[parts_lib.Param]:
  """Reddi et al. 2021's beta_1, beta_2 and tau (their defaults)."""
  return [_P('b1', 0.9, check=_unit, allowed='a number in [0, 1)',
             doc='beta_1, the first moment\'s decay (FedOpt)'),
          _P('b2', 0.99, check=_unit, allowed='a number in [0, 1)',
             doc='beta_2, the second moment\'s decay (FedOpt)'),
          _P('tau', 1e-3, check=_pos, allowed='a finite number > 0',
             doc='tau, the adaptivity (FedOpt; v starts at tau^2)')]


REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry('server', [
    ('sgd', parts_lib.Part('server', 'sgd', sgd,
                           doc='theta - alpha * aggregate (the paper\'s step)')),
    ('momentum', optax_server(
        'momentum', lambda lr, momentum: optax.sgd(lr, momentum=momentum),
        _momentum('beta, heavy-ball momentum (optax.sgd)'),
        doc='server momentum (FedAvgM: Hsu et al. 2019)')),
    ('nesterov', optax_server(
        'nesterov', lambda lr, momentum: optax.sgd(lr, momentum=momentum,
                                                   nesterov=True),
        _momentum('beta, Nesterov momentum (optax.sgd)'),
        doc='Nesterov momentum')),
    ('adam', optax_server(
        'adam', lambda lr, b1, b2, eps: optax.adam(lr, b1=b1, b2=b2, eps=eps),
        _moments(1e-8),
        doc='Adam (Kingma, Ba 2015); FedAdam\'s server (Reddi et al. 2021)')),
    ('amsgrad', optax_server(
        'amsgrad', lambda lr, b1, b2, eps: optax.amsgrad(lr, b1=b1, b2=b2,
                                                         eps=eps),
        _moments(1e-8),
        doc='AMSGrad (Reddi, Kale, Kumar 2018), with optax\'s bias '
        'correction')),
    ('yogi', optax_server(
        'yogi', lambda lr, b1, b2, eps: optax.yogi(lr, b1=b1, b2=b2, eps=eps),
        _moments(1e-3),
        doc='Yogi (Zaheer et al. 2018); FedYogi\'s server')),
    ('fedadam', optax_server(
        'fedadam', lambda lr, b1, b2, tau: fedopt(lr, b1, b2, tau),
        _fedopt_params(),
        doc='FedAdam\'s server (Reddi et al. 2021): Adam on the mean model '
        'change, no bias correction')),
    ('fedyogi', optax_server(
        'fedyogi', lambda lr, b1, b2, tau: fedopt(lr, b1, b2, tau, yogi=True),
        _fedopt_params(),
        doc='FedYogi\'s server (Reddi et al. 2021)')),
    ('cada_amsgrad', optax_server(
        'cada_amsgrad', cada_amsgrad, _moments(1e-7),
        doc='AMSGrad without bias correction: CADA\'s server and its Adam '
        'baseline (Chen, Guo, Sun, Yin 2021)')),
    ('cada_amsgrad_mnist', optax_server(
        'cada_amsgrad_mnist', cada_amsgrad, _moments(1e-7),
        doc='cada_amsgrad writing ||alpha agg||^2 in the triggers\' '
        'history, as CADA\'s MNIST code does (its cada1_mnist, cada2_mnist)',
        opt_in=True, history=sgd_history)),
    ('cada_amsgrad_mnist_typo', optax_server(
        'cada_amsgrad_mnist_typo', cada_amsgrad_typo,
        _moments(1e-7) + _stale_range(),
        doc='cada_amsgrad_mnist with the authors\' typo: vhat frozen at the '
        'first step\'s v on [stale_from, stale_to) (conv1\'s bias)',
        opt_in=True, history=sgd_history)),
    ('feddyn_server', parts_lib.Part(
        'server', 'feddyn_server', feddyn, (),
        lambda theta_P, hyper, own: jnp.zeros_like(theta_P),
        'FedDyn: the participants\' mean step plus N / M (Acar et al. '
        '2021)', opt_in=True)),
    ('ef21bc_server', parts_lib.Part(
        'server', 'ef21bc_server', ef21bc, (), _ef21bc_init,
        'EF21-BC: G + top_k_down(agg - G), theta - alpha G (Fatkhullin et '
        'al. 2021)', opt_in=True, reads=('top_k_down',))),
])
# SERVERS: the registry's names (a server registered later is in it).
__getattr__ = registry.names_attribute(__name__, SERVERS=REGISTRY)


def index(name: str) -> int:
  """The position of `name` in SERVERS (what `Hyper.server` holds)."""
  return REGISTRY.index(name)


def history_entry(step_P, theta_P, new_theta_P, hyper,
                  parts: Sequence[parts_lib.Part]):
  """The round's entry in the triggers' history: ||theta^{k+1} -
  theta^k||^2, or the server's own (`Part.history`) where SERVERS[
  hyper.server] writes one (a program without such a server computes the
  moved distance alone)."""
  entry = collectives.sum_sq(new_theta_P - theta_P)
  for part in parts:
    if part.history is not None:
      entry = jnp.where(hyper.server == index(part.name),
                        part.history(step_P, theta_P, new_theta_P, hyper),
                        entry)
  return entry


def init_states(parts: Sequence[parts_lib.Part], theta_P, hyper
                ) -> dict[str, Any]:
  """{name: state} of the stateful servers among `parts`."""
  return {p.name: p.init(theta_P, hyper, parts_lib.own_params(hyper, p))
          for p in parts if p.stateful}


def update(step_P, theta_P, hyper, parts: Sequence[parts_lib.Part],
           states: dict | None = None, round_: Round | None = None):
  """(theta^{k+1}, states) with SERVERS[hyper.server] among `parts`;
  `round_` for the parts that read it (`reads_round`)."""
  states = dict(states or {})

  def branch(part, step_P, theta_P, hyper, states):
    extra = (round_,) if needs_round(part) else ()
    new_theta, new = part.call(step_P, theta_P, hyper, *extra,
                               params=parts_lib.own_params(hyper, part),
                               state=states.get(part.name))
    new_theta = new_theta.astype(theta_P.dtype)
    if part.stateful:
      states = {**states, part.name: new}
    return new_theta, states

  index_ = parts_lib.local_index(hyper.server, parts, REGISTRY)
  return parts_lib.switch(index_, parts, branch, step_P, theta_P, hyper,
                          states)
