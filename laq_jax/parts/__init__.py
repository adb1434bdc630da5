"""Parts that own their parameters and state, the optax way. ::

    rand_k = compressor('rand_k', fn, params=[Param('k', 100, 'int', ...)])
    compressors.REGISTRY.register('rand_k', rand_k)

A part is a value: its function, the parameters it declares (each with its
default, check and doc, declared once, here) and, when it keeps memory, its
state's `init`. Six kinds exist: a compressor (how a vector is compressed),
an estimator (what a worker compresses into its candidate upload: its
gradient, or the change since its last upload; `laq_jax.estimators`), a
trigger (whether it uploads), a server update (how the server steps with
the aggregate; any optax GradientTransformation, `laq_jax.servers`), a
client (what a participant computes: one gradient, or K local steps of an
optax client optimizer, `laq_jax.clients`) and a broadcast (what the server
sends back: theta, or a compressed change; `laq_jax.broadcasts`).

A part's parameter VALUES are arrays of the run's `Hyper`, grouped by part,
`hyper.params[part name][param name]` (dotted on command lines and in grids:
`rand_k.k`), so a sweep over them is data of one compiled program and a grid
varies them only for the points whose preset uses the part. A part's state
lives in the loop state (`RuleState.parts_M` per worker, `RuleState.server`
on the server) and is checkpointed and sharded with the rest.

The compiled-program cache keys on the part objects (`RunSpec` holds them):
a part registered again under the same name, or a function redefined in a
notebook cell and registered again, is a different part and compiles anew.
Parts compare by identity, as functions do.

Call conventions (keyword arguments only where the part declares them)::

  compressor  fn(grad_P, ref_P, key, hyper[, params=][, state=]) ->
              Compressed, or (Compressed, state) for a stateful one;
              init(num_params, dtype) -> one worker's state.
  trigger     fn(inputs[, params=][, state=]) -> Decision, or (Decision,
              state); init(num_params, dtype[, *, theta_P]) -> one
              worker's state (an init that takes `theta_P` gets theta^0,
              for state that starts at the initial parameters: LASG's).
  server      fn(step_P, theta_P, hyper[, params=][, state=]) -> theta^{k+1},
              or (theta^{k+1}, state); init(theta_P, hyper, params) -> state.
  client      fn(params) -> the client optimizer (optax); init(num_params,
              dtype) -> one worker's control variate (`laq_jax.clients`).
  estimator   fn(inputs[, params=][, state=]) -> (Compressed, compressor
              states), or that and its state; `inputs.compress` is the
              compressor slot (`laq_jax.estimators`); init as a trigger's.
  broadcast   fn(inputs[, params=]) -> (thetahat_P, bits); no state
              (`laq_jax.broadcasts`).
  privacy     fn(inputs[, params=]) -> the privatized upload candidate; no
              state (`laq_jax.privatizers`: differential privacy's
              clipping and noise).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import registry
# (how a compiled step picks and calls a part: its own module)
from laq_jax.parts.dispatch import (init_state, local_index, num_bits,  # pylint: disable=unused-import
                                    own_params, switch, switch_merged)
from laq_jax.show import show

KINDS = ('compressor', 'trigger', 'server', 'client', 'estimator',
         'broadcast', 'privacy')
_INT32_MAX = 2**31 - 1


def check_number(value, kind: str, check, allowed: str, where: str) -> None:
  """The one check of a number or a grid's array of them, for a Hyper
  field (`laq_jax.fields.check_value`) and a part's parameter alike: every
  element an integer ('int': not 4.0, not True, within int32) or a finite
  number ('float': not a bool), and allowed by `check` (element-wise; None:
  any); else ValueError "{where}={value} is not allowed: it must be
  {allowed}"."""
  bad = ValueError(f'{where}={show(value)} is not allowed: it must be '
                   f'{allowed}')
  if isinstance(value, (str, bytes, bool, np.bool_)):
    raise bad
  try:
    a = np.asarray(value)
  except (TypeError, ValueError):
    raise bad from None
  if a.size == 0 or a.dtype.kind not in ('i' if kind == 'int' else 'if'):
    raise bad
  with np.errstate(invalid='ignore'):
    ok = np.all(np.isfinite(a.astype(np.float64)))
    if kind == 'int':
      ok = ok and np.all(np.abs(a.astype(np.float64)) <= _INT32_MAX)
    if ok and check is not None:
      ok = bool(np.all(check(a)))
  if not ok:
    raise bad


@dataclasses.dataclass(frozen=True)
class Param:
  """One parameter a part declares.

  Attributes:
    name: its name within the part (`rand_k.k` on a command line).
    default: its value unless a config, preset or grid sets it.
    kind: 'float' (in the run's precision) or 'int' (int32).
    check: element-wise test on a NumPy array of values (None: finite).
    allowed: what `check` allows, in words (for error messages).
    doc: one line.
  """
  name: str
  default: float | int
  kind: str = 'float'
  check: Callable[[np.ndarray], np.ndarray] | None = None
  allowed: str = 'a finite number'
  doc: str = ''

  def __post_init__(self):
    if self.kind not in ('float', 'int'):
      raise ValueError(f'Param {show(self.name)}: kind={show(self.kind)} is '
                       "not allowed: it must be 'float' or 'int'")
    if not isinstance(self.name, str) or not self.name.isidentifier():
      raise ValueError(f'Param name {show(self.name)} is not allowed: it must '
                       'be an identifier')
    self.validate(self.default, f'{self.name} (its default)')

  def validate(self, value, where: str | None = None) -> None:
    """Raises ValueError unless every element of `value` is allowed."""
    check_number(value, self.kind, self.check, self.allowed,
                 where or self.name)

  def array(self, value, dtype) -> jax.Array:
    """The value as the Hyper array: int32, or the run's float dtype."""
    return jnp.asarray(value, jnp.int32 if self.kind == 'int' else dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class Part:
  """A compressor, trigger, server update or client, as a value.

  Attributes:
    kind: one of KINDS.
    name: what configs, presets and grids call it.
    fn: the part's function (see the module docstring for its call).
    params: the parameters it declares.
    init: its state's initializer, or None (no state).
    doc: one line.
    opt_in: compiled into a program only where named (`RunSpec.triggers`
      etc., or by the points of a sweep that use it), never by default: for
      parts that cost every program that compiles them in, whether its
      points use them or not (LASG's and CADA's triggers take a second
      gradient every step and keep a copy of theta per worker; a vmapped
      grid computes every compiled branch).
    wire: a compressor's wire format (a `laq_jax.codecs.Codec`), or an
      estimator's (a `laq_jax.codecs.Uplink`: its upload in segments), or
      a broadcast's (a `laq_jax.codecs.Downlink`: what the server sends
      instead of theta), or None: a compressor or estimator without one is
      not deployable (`laq_jax.wire`).
    after: a stateful client's update of its state after the server's
      step, `after(params, own_P, local_P, theta_P, new_theta_P) ->
      own_P` from its last local iterate, the parameters it started from
      and theta^{k+1} (Scaffnew's h_m, FedDyn's nu_m); such a part's fn
      takes its state too, `fn(params, own_P)`, so that its local steps
      read it. None: a stateful client keeps control variates (SCAFFOLD's;
      `laq_jax.clients`).
    reads: the other parts whose parameters it reads (EF21-P's and
      EF21-BC's broadcasts and EF21-BC's server read `top_k_down`'s k):
      a config or grid may set them wherever this part is used.
    history: a server's own entry in the triggers' history of a round,
      `history(step_P, theta_P, new_theta_P, hyper) -> scalar`; None: the
      moved distance ||theta^{k+1} - theta^k||^2 (CADA's MNIST code
      records ||alpha agg||^2, the step SGD would take, whatever its Adam
      server moved: `cada_amsgrad_mnist`).
  """
  kind: str
  name: str
  fn: Callable
  params: tuple[Param, ...] = ()
  init: Callable | None = None
  doc: str = ''
  opt_in: bool = False
  wire: Any = None
  after: Callable | None = None
  reads: tuple[str, ...] = ()
  history: Callable | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'part kind {show(self.kind)} is not allowed; allowed: '
                       f'{", ".join(KINDS)}')
    if not callable(self.fn):
      raise ValueError(f'{self.kind} {show(self.name)}: fn={show(self.fn)} is '
                       'not callable')
    params = tuple(self.params)
    for p in params:
      if not isinstance(p, Param):
        raise ValueError(f'{self.kind} {show(self.name)}: params must be '
                         f'laq_jax.parts.Param values, not {show(p)}')
    names = [p.name for p in params]
    if len(set(names)) != len(names):
      raise ValueError(f'{self.kind} {show(self.name)} declares a parameter '
                       f'twice: {names}')
    object.__setattr__(self, 'params', params)
    if self.wire is not None and self.kind not in ('compressor',
                                                   'estimator', 'broadcast'):
      raise ValueError(f'{self.kind} {show(self.name)}: only a compressor, '
                       'an estimator or a broadcast has a wire format')
    if self.history is not None and self.kind != 'server':
      raise ValueError(f'{self.kind} {show(self.name)}: only a server '
                       'writes its own history entry')
    if self.after is not None and (self.kind != 'client' or self.init is None):
      raise ValueError(f'{self.kind} {show(self.name)}: only a stateful '
                       'client (one with an init) has an after-step update')

  def __call__(self, *args, **kwargs):
    return self.fn(*args, **kwargs)

  @property
  def stateful(self) -> bool:
    return self.init is not None

  @property
  def param_names(self) -> tuple[str, ...]:
    return tuple(p.name for p in self.params)

  def param(self, name: str) -> Param:
    for p in self.params:
      if p.name == name:
        return p
    raise ValueError(show_unknown(f'{self.name}.{name}', [
        f'{self.name}.{p.name}' for p in self.params],
        f'parameter of {self.kind} {show(self.name)}'))

  def defaults(self) -> dict[str, Any]:
    return {p.name: p.default for p in self.params}

  def call(self, *args, params=None, state=None):
    """Calls `fn` with `params` / `state` where the part declares them;
    returns (output, new state or None)."""
    kwargs = {}
    if self.params:
      kwargs['params'] = params
    if self.stateful:
      kwargs['state'] = state
    out = self.fn(*args, **kwargs)
    if self.stateful:
      if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f'{self.kind} {show(self.name)} is stateful (it has an '
                        'init): its fn must return (output, new state)')
      return out
    return out, None

  def __repr__(self):
    extras = ''.join(
        [f', params={self.param_names}' if self.params else '',
         ', stateful' if self.stateful else '',
         ', opt_in' if self.opt_in else '',
         ', wire' if self.wire is not None else ''])
    return f'Part({self.kind}, {self.name!r}{extras})'


def show_unknown(name, allowed, what) -> str:
  """The message for a name not among `allowed`: "no {what} 'x'; did you
  mean 'y'?" (`laq_jax.show.unknown`)."""
  from laq_jax import show as show_lib  # pylint: disable=g-import-not-at-top
  return show_lib.unknown(name, list(allowed), what)


def compressor(name: str, fn: Callable, *, params: Iterable[Param] = (),
               init: Callable | None = None, doc: str = '',
               opt_in: bool = False, wire=None) -> Part:
  """A compressor part (register it in `compressors.REGISTRY`); `wire`, its
  wire format (a `laq_jax.codecs.Codec`), makes it deployable."""
  return Part('compressor', name, fn, tuple(params), init, doc, opt_in, wire)


def trigger(name: str, fn: Callable, *, params: Iterable[Param] = (),
            init: Callable | None = None, doc: str = '',
            opt_in: bool = False) -> Part:
  """A trigger part (register it in `trigger.REGISTRY`)."""
  return Part('trigger', name, fn, tuple(params), init, doc, opt_in)


def estimator(name: str, fn: Callable, *, params: Iterable[Param] = (),
              init: Callable | None = None, doc: str = '',
              opt_in: bool = False, wire: Any = None) -> Part:
  """An estimator part (register it in `estimators.REGISTRY`); `wire`: its
  upload's wire (a `laq_jax.codecs.Uplink`), or None (deployable only as
  the built-ins direct and innovation are: one compressor's payload)."""
  return Part('estimator', name, fn, tuple(params), init, doc, opt_in,
              wire=wire)


def broadcast(name: str, fn: Callable, *, params: Iterable[Param] = (),
              doc: str = '', opt_in: bool = False,
              reads: Iterable[str] = (), wire: Any = None) -> Part:
  """A broadcast part (register it in `broadcasts.REGISTRY`); `wire`: a
  `laq_jax.codecs.Downlink` where the workers do not receive theta itself
  (EF21-BC's), else None (`laq_jax.deploy` sends theta)."""
  return Part('broadcast', name, fn, tuple(params), None, doc, opt_in,
              reads=tuple(reads), wire=wire)


class PartRegistry(registry.Registry):
  """A Registry of Parts of one kind. Registering a plain function makes it
  a part without parameters or state (the older way still works)."""

  def __init__(self, kind: str, parts=()):
    super().__init__(kind, ())
    _REGISTRIES[kind] = self
    for name, part in parts:
      self.register(name, part)

  def name_allowed(self, name) -> bool:
    """Letters, digits and _; for a compressor also a chain of such names,
    'chain(top_k,qsgd)' (`compressors.chain`)."""
    if (self.kind == 'compressor' and isinstance(name, str)
        and name.startswith('chain(') and name.endswith(')')):
      return all(super(PartRegistry, self).name_allowed(n)
                 for n in name[6:-1].split(','))
    return super().name_allowed(name)

  def register(self, name: str, part, *, replace: bool = False) -> Part:
    if not isinstance(part, Part):
      if not callable(part):
        raise ValueError(f'{self.kind} {show(name)}: {show(part)} is neither a '
                         'laq_jax.parts.Part nor a function')
      part = Part(self.kind, name, part)
    if part.kind != self.kind:
      raise ValueError(f'{self.kind} {show(name)}: the part is a {part.kind}; '
                       f'register it in the {part.kind}s\' REGISTRY')
    if part.name != name:
      part = dataclasses.replace(part, name=name)
    for kind, other in _REGISTRIES.items():
      if kind != self.kind and name in other:
        raise ValueError(f'{self.kind} name {show(name)} is taken by a '
                         f'{kind}: part names are shared by compressors, '
                         'triggers, servers, clients, estimators, '
                         'broadcasts and privacy parts (their '
                         'parameters are '
                         'grouped by name)')
    return super().register(name, part, replace=replace)

  @property
  def default_names(self) -> tuple[str, ...]:
    """What a program compiles in when not told: every registered part
    but the opt-in ones (`Part.opt_in`)."""
    return tuple(n for n in self.names if not self.get(n).opt_in)

  def parts(self, names: Sequence[str] | None = None) -> tuple[Part, ...]:
    """The part objects of `names` (`default_names` when None)."""
    names = self.check_names(self.default_names if names is None else names)
    return tuple(self.get(n) for n in names)


_REGISTRIES: dict[str, PartRegistry] = {}


def registries() -> dict[str, PartRegistry]:
  """{kind: its registry}. Each kind's module makes its registry when
  imported, and importing any `laq_jax` module imports them all first (the
  package's `__init__`), so this module imports none of them (no circle)."""
  missing = [k for k in KINDS if k not in _REGISTRIES]
  if missing:  # (only while the package itself is being imported)
    raise RuntimeError(f'the {", ".join(missing)} registry is not made yet: '
                       'import laq_jax before asking for every part')
  return {k: _REGISTRIES[k] for k in KINDS}


def find(name: str) -> Part:
  """The registered part called `name`, of any kind."""
  for reg in registries().values():
    if name in reg:
      return reg.get(name)
  raise ValueError(show_unknown(name, [n for r in registries().values()
                                       for n in r.names], 'part'))


def param_keys() -> tuple[str, ...]:
  """Every registered part's parameters, dotted ('rand_k.k'), in the order
  compressors, triggers, servers, clients, estimators, broadcasts, then
  declaration."""
  return tuple(f'{p.name}.{q.name}' for reg in registries().values()
               for p in (reg.get(n) for n in reg.names) for q in p.params)


def split_key(key: str) -> tuple[Part, Param]:
  """'rand_k.k' -> (the part, its Param); ValueError naming the closest."""
  if not isinstance(key, str) or key.count('.') != 1:
    raise ValueError(show_unknown(key, param_keys(), 'part parameter'))
  part_name, param_name = key.split('.')
  try:
    part = find(part_name)
  except ValueError:
    raise ValueError(show_unknown(key, param_keys(),
                                  'part parameter')) from None
  return part, part.param(param_name)


def check_value(key: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is allowed for part parameter `key`."""
  _, param = split_key(key)
  param.validate(value, where or key)


def param_arrays(values: Mapping[str, Any], dtype
                 ) -> dict[str, dict[str, jax.Array]]:
  """{part: {param: array}} for every registered part with parameters:
  its defaults, replaced by the dotted `values` given (checked)."""
  out: dict[str, dict[str, Any]] = {}
  for reg in registries().values():
    for name in reg.names:
      part = reg.get(name)
      if part.params:
        out[name] = dict(part.defaults())
  for key, value in values.items():
    part, param = split_key(key)
    param.validate(value, key)
    out[part.name][param.name] = value
  return {name: {p: find(name).param(p).array(v, dtype)
                 for p, v in group.items()} for name, group in out.items()}


def default_groups() -> dict[str, dict[str, Any]]:
  """{part: {param: default}} of every registered part with parameters (a
  config's `params` group)."""
  return {name: reg.get(name).defaults() for reg in registries().values()
          for name in reg.names if reg.get(name).params}


def import_modules(modules: str | Sequence[str]) -> None:
  """Imports a user's modules (comma-separated text or names), whose import
  registers their parts and presets; ValueError naming one that fails."""
  import importlib  # pylint: disable=g-import-not-at-top
  if isinstance(modules, str):
    modules = [m.strip() for m in modules.split(',') if m.strip()]
  for module in modules:
    try:
      importlib.import_module(module)
    except ImportError as e:
      raise ValueError(f'modules={module!r} could not be imported ({e}): give '
                       'importable module names (on PYTHONPATH, or the '
                       'current folder), comma-separated') from None
    except Exception as e:  # pylint: disable=broad-except
      # e.g. a launcher (experiments.sweep), whose import defines its
      # command-line flags a second time: absl's DuplicateFlagError.
      raise ValueError(
          f'modules={module!r} fails on import ({type(e).__name__}: '
          f'{" ".join(str(e).split())[:160]}): give modules that register '
          'parts or presets, not a launcher or a script') from None


def fill_params(params: dict, like_dtype) -> dict:
  """`params` with every registered part's defaults where missing (a part
  registered after the Hyper was built)."""
  full = param_arrays({}, like_dtype)
  for name, group in full.items():
    group.update(params.get(name, {}))
  return full
