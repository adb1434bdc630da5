"""The algorithm presets: each a named bundle of parts (compressor,
trigger, server, client, estimator, broadcast, compressor_b, privacy) and their
settings, and their composition by slot ('laq+server=adam'). ::

    presets.get_algorithm('laq')              # the Algorithm
    presets.compose('laq', server='adam')     # 'laq+server=adam'

Its names are `laq_jax.hyper`'s too, where they are documented.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from laq_jax import parts as parts_lib
from laq_jax import registry
from laq_jax.parts import broadcasts
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators
from laq_jax.parts import privatizers
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.round import participation as participation_lib
from laq_jax.round.fields import check_value
from laq_jax.show import show


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A preset of the one rule: which parts it plugs in.

  Attributes:
    name: what configs and sweeps call it.
    stochastic: minibatch gradients (else full shards).
    compressor: one of `compressors.COMPRESSORS`.
    innovation: compress g - Qhat (LAQ, EF21) rather than g itself (QSGD):
      the estimator 'innovation', else 'direct'.
    trigger: one of `trigger.TRIGGERS`: 'eager' (always upload), 'laq' (the LAG/LAQ
      rule), 'clag' (CLAG's, Richtarik et al. 2022).
    server: one of `servers.SERVERS`: how the server steps ('sgd': theta -
      alpha * aggregate; 'momentum', 'adam', 'amsgrad', ... through optax).
    params: the preset's values of its parts' own parameters, dotted
      ({'momentum.momentum': 0.9}); a config or grid may override them.
    error_feedback: add what earlier compressions dropped before compressing.
    downlink: the server's broadcast is quantized too (b bits, LAQ's
      quantizer on the parameters' innovation): the broadcast 'quantized',
      else 'full'.
    reference: where it comes from.
    client: one of `clients.CLIENTS`: what a participant computes
      ('gradient': one gradient; 'local', 'scaffold', ...: K local steps,
      uploading the model change).
    absent: what `absent='auto'` means for it ('stale' or 'drop').
    weighting: what `weighting='auto'` means for it ('sum', 'samples' or
      'uniform').
    estimator: one of `estimators.ESTIMATORS`: what a worker compresses
      into its candidate upload ('' for the one `innovation` says; a name
      given here sets `innovation` to whether it is 'innovation').
    compressor_b: one of `compressors.COMPRESSORS`: a second compressor an
      estimator may call (`estimators.Inputs.compress_b`; the 3PC family's
      two-stage estimators), 'identity' where none does.
    broadcast: one of `broadcasts.BROADCASTS`: what the server sends back
      ('' for the one `downlink` says; a name given here sets `downlink` to
      whether it is other than 'full').
    privacy: one of `privatizers.PRIVACY`: how the uploads are privatized
      ('off'; 'dp_central', 'dp_distributed', 'dp_local': DP-FedAvg's
      clipping and Gaussian noise, `laq_jax.privatizers`).
    settings: its paper's values of Hyper fields, which `make_hyper` takes
      for the fields it is not given; `server_lr` (eta_s, the server's
      step on a local client's model change) also where it is given as 0,
      its default, so that a config or a sweep over presets runs each at
      its own server step unless one is named.
  """
  name: str
  stochastic: bool
  compressor: str
  innovation: bool
  trigger: str = 'eager'
  error_feedback: bool = False
  downlink: bool = False
  reference: str = ''
  server: str = 'sgd'
  params: tuple[tuple[str, Any], ...] = ()
  client: str = 'gradient'
  absent: str = 'stale'
  weighting: str = 'sum'
  settings: tuple[tuple[str, Any], ...] = ()
  estimator: str = ''
  broadcast: str = ''
  compressor_b: str = 'identity'
  warm_start: bool = False
  privacy: str = 'off'

  def __post_init__(self):
    if not self.estimator:
      object.__setattr__(self, 'estimator',
                         'innovation' if self.innovation else 'direct')
    object.__setattr__(self, 'innovation', self.estimator == 'innovation')
    if not self.broadcast:
      object.__setattr__(self, 'broadcast',
                         'quantized' if self.downlink else 'full')
    object.__setattr__(self, 'downlink', self.broadcast != 'full')
    object.__setattr__(self, 'params', tuple(
        dict(self.params).items()))  # a dict or pairs, kept as pairs
    object.__setattr__(self, 'settings', tuple(dict(self.settings).items()))
    if self.absent not in participation_lib.ABSENT:
      raise ValueError(f'Algorithm {self.name!r}: absent={self.absent!r} is '
                       f'not allowed; allowed: {", ".join(participation_lib.ABSENT)}')
    if self.weighting not in participation_lib.WEIGHTING:
      raise ValueError(f'Algorithm {self.name!r}: weighting={self.weighting!r} '
                       'is not allowed; allowed: '
                       f'{", ".join(participation_lib.WEIGHTING)}')

  @property
  def local(self) -> bool:
    """Whether participants run local steps (upload a model change)."""
    return self.client != 'gradient'

  @property
  def lazy(self) -> bool:
    """Whether workers may skip an upload."""
    return self.trigger != 'eager'

  @property
  def quantize(self) -> bool:
    """Whether uploads go through LAQ's innovation quantizer."""
    return self.compressor == 'uniform'


_A = Algorithm


def _local_presets() -> tuple[Algorithm, ...]:
  """FedAvg and friends: client part, server, weighting and the papers'
  settings (docs/algorithm.md, "Local work", cites each)."""
  fed = dict(client='local', absent='drop', weighting='samples')
  # McMahan et al. 2017 (MNIST, B = 10, E = 1 on 600 samples: 60 steps; a
  # CPU run takes K = 10 by default): client SGD, server step 1.
  local = {'local.steps': 10, 'local.lr': 0.1}
  return (
      _A('fedavg', True, 'identity', False, params=local,
         settings={'server_lr': 1.0}, **fed,
         reference='McMahan et al. 2017: FedAvg'),
      _A('fedavgm', True, 'identity', False, server='momentum',
         params={**local, 'momentum.momentum': 0.9},
         settings={'server_lr': 1.0}, **fed,
         reference='Hsu, Qi, Brown 2019: FedAvgM (server momentum 0.9)'),
      _A('fedadam', True, 'identity', False, server='fedadam',
         params={'local.steps': 10, 'local.lr': 10 ** -1.5},
         settings={'server_lr': 0.01}, **fed,
         reference='Reddi et al. 2021: FedAdam'),
      _A('fedyogi', True, 'identity', False, server='fedyogi',
         params={'local.steps': 10, 'local.lr': 10 ** -1.5},
         settings={'server_lr': 0.01}, **fed,
         reference='Reddi et al. 2021: FedYogi'),
      _A('fedprox', True, 'identity', False,
         params={**local, 'local.mu': 1.0}, settings={'server_lr': 1.0},
         **fed, reference='Li et al. 2020: FedProx'),
      _A('scaffold', True, 'identity', False, client='scaffold',
         params={'scaffold.steps': 10, 'scaffold.lr': 0.1},
         settings={'server_lr': 1.0}, absent='drop', weighting='samples',
         reference='Karimireddy et al. 2020: SCAFFOLD, option II'),
      _A('fedpaq', True, 'qsgd', False, params=local,
         settings={'server_lr': 1.0}, **fed,
         reference='Reisizadeh et al. 2020: FedPAQ (QSGD\'s quantizer on '
                   'the model change)'),
      _A('local_sgd', True, 'identity', False, client='local', params=local,
         settings={'server_lr': 1.0}, absent='drop', weighting='uniform',
         reference='local SGD: every client, every round, K steps, the '
                   'models averaged (the LASG code\'s baseline)'),
      _A('fedlaq', True, 'uniform', True, 'laq', params=local,
         settings={'server_lr': 1.0}, **fed,
         reference='ours: LAQ\'s quantizer and trigger on the model change'),
  )


AFTER_LAQ: tuple[Algorithm, ...] = (
    _A('tpc_ef21', False, 'top_k', True, 'eager', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): EF21, warm start'),
    _A('tpc_lag', False, 'identity', True, 'tpc_lazy', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): LAG, its test on the '
                 'gradient change'),
    _A('tpc_clag', False, 'top_k', True, 'tpc_lazy', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): CLAG, its test on the '
                 'gradient change'),
    _A('tpc_v1', False, 'top_k', False, estimator='tpc_v1', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): v1, y + C(g - y) '
                 '(idealized: the server lacks y)'),
    _A('tpc_v2', False, 'top_k', False, estimator='tpc_v2',
       compressor_b='randk_b', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): v2, Rand-K then top-k'),
    _A('tpc_v3', False, 'top_k', False, estimator='tpc_v3', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): v3, LAG then EF21'),
    _A('tpc_v4', False, 'top_k', False, estimator='tpc_v4',
       compressor_b='top_k_b', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): v4, top-k then top-k'),
    _A('tpc_v5', False, 'top_k', False, estimator='marina', warm_start=True,
       reference='Richtarik et al. 2022 (3PC): v5, MARINA\'s coin with '
                 'top-k'),
    _A('marina', False, 'randk', False, estimator='marina', warm_start=True,
       reference='Gorbunov, Burlachenko, Li, Richtarik 2021: MARINA'),
    _A('dasha', False, 'randk', False, estimator='dasha', warm_start=True,
       reference='Tyurin, Richtarik 2023: DASHA'),
    _A('dasha_mvr', True, 'randk', False, estimator='dasha_mvr',
       warm_start=True,
       reference='Tyurin, Richtarik 2023: DASHA-MVR (minibatch pairs)'),
    _A('ef21_p_diana', False, 'randk', False, estimator='diana',
       broadcast='ef21p', warm_start=True,
       reference='Gruntkowska, Tyurin, Richtarik 2023: EF21-P + DIANA'),
    _A('ef21_p_dcgd', False, 'randk', False, broadcast='ef21p',
       warm_start=True,
       reference='Gruntkowska, Tyurin, Richtarik 2023: EF21-P + DCGD'),
    _A('ef21_bc', False, 'top_k', True, 'eager', server='ef21bc_server',
       broadcast='ef21bc', warm_start=True,
       reference='Fatkhullin et al. 2021: EF21-BC (EF21 both ways)'),
    # Scaffnew / ProxSkip (Mishchenko, Malinovsky, Stich, Richtarik 2022):
    # K_k ~ Geometric(p) steps corrected by -h_m, the uniform mean of the
    # local iterates (eta_s = 1), h_m moved after it. Every client, every
    # round (refused with partial participation and a deadline).
    _A('scaffnew', True, 'identity', False, client='scaffnew',
       settings={'server_lr': 1.0}, absent='drop', weighting='uniform',
       reference='Mishchenko et al. 2022: Scaffnew (ProxSkip)'),
    # FedDyn (Acar et al. 2021): the authors' code's alpha 0.01, eta_l 0.1;
    # absent clients keep nu_m (N counts them), the mean over S_k.
    _A('feddyn', True, 'identity', False, client='feddyn',
       server='feddyn_server', settings={'server_lr': 1.0}, absent='drop',
       weighting='uniform', reference='Acar et al. 2021: FedDyn'),
    # FedNova (Wang, Liu, Liang, Joshi, Poor 2020): E_m ~ U{2,3,4} epochs
    # per client and round (the authors' and Flower's draws), uniform
    # weights (the suite's f = sum_m f_m), the server's step 1.
    _A('fednova', True, 'identity', False, client='fednova',
       params={'fednova.lr': 0.05, 'fednova.epochs_min': 2,
               'fednova.epochs_max': 4},
       settings={'server_lr': 1.0}, absent='drop', weighting='uniform',
       reference='Wang et al. 2020: FedNova (vanilla client SGD)'),
    _A('fednova_momentum', True, 'identity', False, client='fednova',
       params={'fednova.lr': 0.02, 'fednova.momentum': 0.9,
               'fednova.epochs_min': 2, 'fednova.epochs_max': 4},
       settings={'server_lr': 1.0}, absent='drop', weighting='uniform',
       reference='Wang et al. 2020: FedNova, local momentum 0.9'),
)


ALGORITHMS: dict[str, Algorithm] = registry.track({
    a.name: a for a in (
        # The LAQ paper's family (Sun et al. 2019).
        _A('gd', False, 'identity', False, 'eager', reference='GD'),
        _A('qgd', False, 'uniform', True, 'eager',
           reference='Sun et al. 2019: QGD, the quantizer that never skips'),
        _A('lag', False, 'identity', False, 'laq',
           reference='Chen et al. 2018: LAG-WK'),
        _A('laq', False, 'uniform', True, 'laq', reference='Sun et al. 2019'),
        _A('sgd', True, 'identity', False, 'eager', reference='SGD'),
        _A('sqgd', True, 'uniform', True, 'eager',
           reference='QGD with minibatch gradients'),
        _A('slag', True, 'identity', False, 'laq',
           reference='LAG with minibatch gradients'),
        _A('slaq', True, 'uniform', True, 'laq',
           reference='Sun et al. 2019: SLAQ'),
        # The field's compressors and rules.
        _A('qsgd', True, 'qsgd', False, 'eager',
           reference='Alistarh et al. 2017: QSGD'),
        _A('ssgd', True, 'rand_p', False, 'eager',
           reference='Wangni et al. 2018: sparsified SGD'),
        _A('terngrad', True, 'terngrad', False, 'eager',
           reference='Wen et al. 2017: TernGrad'),
        _A('ef_signsgd', True, 'sign', False, 'eager', error_feedback=True,
           reference='Karimireddy et al. 2019: EF-SignSGD'),
        _A('topk_ef', True, 'top_k', False, 'eager', error_feedback=True,
           reference='Stich et al. 2018; Lin et al. 2018 (DGC\'s core)'),
        _A('ef21', False, 'top_k', True, 'eager',
           reference='Richtarik, Sokolov, Fatkhullin 2021: EF21'),
        _A('ef21_sgd', True, 'top_k', True, 'eager',
           reference='EF21 with minibatch gradients'),
        _A('clag', False, 'top_k', True, 'clag',
           reference='Richtarik et al. 2022 (3PC): CLAG'),
        _A('two_laq', False, 'uniform', True, 'laq', downlink=True,
           reference='Sun et al., TPAMI 2020: LAQ with a quantized '
                     'broadcast'),
        # The LAQ authors' follow-ups: two gradients on the same sample.
        _A('lasg_wk2', True, 'identity', False, 'lasg_wk2',
           reference='Chen, Sun, Yin 2020: LASG-WK2'),
        _A('lasg_wk1', True, 'identity', False, 'lasg_wk1',
           reference='Chen, Sun, Yin 2020: LASG-WK1'),
        _A('lasg_ps', True, 'identity', False, 'lasg_ps',
           reference='Chen, Sun, Yin 2020: LASG-PS'),
        _A('lasg_wk2_laq', True, 'uniform', True, 'lasg_wk2',
           reference='LASG-WK2 with LAQ\'s quantizer (ours: the journal '
                     'version names the combination)'),
        _A('lasg_wk1_laq', True, 'uniform', True, 'lasg_wk1',
           reference='LASG-WK1 with LAQ\'s quantizer'),
        _A('lasg_ps_laq', True, 'uniform', True, 'lasg_ps',
           reference='LASG-PS with LAQ\'s quantizer'),
        _A('cada1', True, 'identity', False, 'cada_wk1',
           server='cada_amsgrad',
           reference='Chen, Guo, Sun, Yin 2021: CADA1'),
        _A('cada2', True, 'identity', False, 'cada_wk2',
           server='cada_amsgrad',
           reference='Chen, Guo, Sun, Yin 2021: CADA2'),
        _A('cada_adam', True, 'identity', False, 'eager',
           server='cada_amsgrad',
           reference='CADA\'s baseline: distributed Adam (AMSGrad, no '
                     'bias correction), every worker every step'),
        # CADA as its MNIST code runs (ChrisYZZ/CADA-master Python/MNIST):
        # LASG's WK1/WK2 tests against the history of ||alpha agg||^2.
        _A('cada1_mnist', True, 'identity', False, 'lasg_wk1',
           server='cada_amsgrad_mnist',
           reference='CADA1 as the authors\' MNIST code runs it: LASG-WK1\'s '
                     'test, the history of ||alpha agg||^2'),
        _A('cada2_mnist', True, 'identity', False, 'lasg_wk2',
           server='cada_amsgrad_mnist',
           reference='CADA2 as the authors\' MNIST code runs it: LASG-WK2\'s '
                     'test, the history of ||alpha agg||^2'),
        # ... and with its typo (utils_gpu.py:158: conv1's bias keeps vhat
        # at the first step's v), to reproduce the authors' saved runs.
        _A('cada1_mnist_typo', True, 'identity', False, 'lasg_wk1',
           server='cada_amsgrad_mnist_typo',
           reference='cada1_mnist with the authors\' AMSGrad typo (their '
                     'saved runs)'),
        _A('cada2_mnist_typo', True, 'identity', False, 'lasg_wk2',
           server='cada_amsgrad_mnist_typo',
           reference='cada2_mnist with the authors\' AMSGrad typo (their '
                     'saved runs)'),
        _A('cada_adam_typo', True, 'identity', False, 'eager',
           server='cada_amsgrad_mnist_typo',
           reference='cada_adam with the authors\' AMSGrad typo (their '
                     'pure_adam.py shares it)'),
        # Rounds with local work (docs/algorithm.md, "Local work"): the
        # upload is the model change Delta_m after K local steps.
        *_local_presets(),
        # After LAQ (docs/algorithm.md, "After LAQ"): the 3PC family,
        # MARINA, DASHA and EF21-P, each worker's first upload its gradient
        # (warm start); FedNova.
        *AFTER_LAQ,
    )
})


def register_algorithm(algorithm: Algorithm, *, replace: bool = False
                       ) -> Algorithm:
  """Adds a preset (e.g. of a compressor or trigger registered from user
  code) so that configs, sweeps and `make_hyper` can name it.

  Raises:
    ValueError: its compressor or trigger is not registered, or its name is
      taken (unless replace=True).
  """
  compressors.index(algorithm.compressor)
  compressors.index(algorithm.compressor_b)
  estimators.index(algorithm.estimator)
  broadcasts.index(algorithm.broadcast)
  privatizers.index(algorithm.privacy)
  trigger_lib.index(algorithm.trigger)
  servers_lib.index(algorithm.server)
  clients_lib.index(algorithm.client)
  for key, value in algorithm.settings:
    check_value(key, value, f'{algorithm.name}.settings[{key!r}]')
  for key, value in algorithm.params:
    parts_lib.check_value(key, value, f'{algorithm.name}.params[{key!r}]')
  if algorithm.name in ALGORITHMS and not replace:
    raise ValueError(f'algorithm {show(algorithm.name)} is already registered; '
                     'pass replace=True to replace it')
  ALGORITHMS[algorithm.name] = algorithm
  return algorithm


# The slots of a preset a name may fill with another part
# ('laq+server=adam'), each with its registry's module.
SLOTS = {'compressor': compressors, 'trigger': trigger_lib,
         'server': servers_lib, 'client': clients_lib,
         'estimator': estimators, 'broadcast': broadcasts,
         'compressor_b': compressors, 'privacy': privatizers}
# Error feedback is a wrapper in the compressor slot: 'ef(top_k)' is top_k
# with the worker's error memory added before compressing (the preset's
# `error_feedback`); a preset that has it holds 'ef(...)' in that slot.


def slot_value(algorithm: Algorithm, slot: str) -> str:
  """What `algorithm` holds in `slot`: its part's name, 'ef(top_k)' for a
  compressor with error feedback."""
  if slot == 'compressor' and algorithm.error_feedback:
    return f'ef({algorithm.compressor})'
  return getattr(algorithm, slot)


def parse_slot(slot: str, value: str, where: str = '') -> dict[str, Any]:
  """The Algorithm fields a slot's value sets ('ef(top_k)' in the
  compressor slot: compressor='top_k', error_feedback=True; a plain
  compressor: error_feedback=False).

  Raises:
    ValueError: a slot that is not one of SLOTS, or a part not registered
      for it (named, with what is allowed).
  """
  where = f' in {show(where)}' if where else ''
  if slot not in SLOTS:
    raise ValueError(f'slot {show(slot)}{where}: the slots are '
                     f'{", ".join(SLOTS)}')
  part, fields = value, {}
  if slot == 'compressor':
    inner = (value[3:-1] if isinstance(value, str)
             and value.startswith('ef(') and value.endswith(')') else None)
    part = value if inner is None else inner
    fields['error_feedback'] = inner is not None
    if (isinstance(part, str) and part.startswith('chain(')
        and part.endswith(')')):  # registered once, by its name
      part = compressors.chain(part[6:-1].split(','))
  names = SLOTS[slot].REGISTRY.names
  if part not in names:
    raise ValueError(
        f'{slot}={show(value)}{where}: a {slot} is one of {", ".join(names)}'
        + (' (or ef(one of them): error feedback around it; '
           'chain(a,b): b compressing what a sent)'
           if slot == 'compressor' else ''))
  return {slot: part, **fields}


def compose(algo: str | Algorithm, **slots: str) -> Algorithm:
  """The preset `algo` with other parts in its slots (compressor, trigger,
  server, client, estimator, broadcast, compressor_b): `compose('laq',
  server='adam')` is LAQ's uploads and trigger stepped by Adam, named
  'laq+server=adam', the name configs and grids give it (`get_algorithm` reads such names). In the compressor slot
  'ef(top_k)' wraps a compressor in error feedback ('sgd+compressor=ef(sign)'
  is EF-signSGD), and a plain name there runs without it. The preset's
  own settings and parameters stay; a part put in a slot runs at its
  parameters' defaults unless a config or grid names them.

  Raises:
    ValueError: a slot that is not one of SLOTS, or a part that is not
      registered for it (named, with what is allowed).
  """
  base = algo if isinstance(algo, Algorithm) else get_algorithm(algo)
  fields = {slot: parse_slot(slot, part, base.name)
            for slot, part in slots.items()}
  # (a slot given its preset's own part changes nothing: 'laq' stays 'laq')
  slots = {k: v for k, v in slots.items() if slot_value(base, k) != v}
  if not slots:
    return base
  name = '+'.join([base.name] + [f'{k}={slots[k]}' for k in SLOTS
                                 if k in slots])
  return dataclasses.replace(
      base, name=name, **{f: v for k in slots for f, v in fields[k].items()})


def get_algorithm(name: str) -> Algorithm:
  """Returns the preset called `name` (or a composed one, 'laq+server=adam':
  `compose`), or a ValueError listing the choices."""
  try:
    return ALGORITHMS[name]
  except (KeyError, TypeError):
    pass
  if isinstance(name, str) and '+' in name:
    base, *items = name.split('+')
    slots = {}
    for item in items:
      slot, eq, part = item.partition('=')
      if not eq or slot in slots:
        raise ValueError(f'algorithm {show(name)}: after the preset, '
                         "'+slot=part' once per slot (slots: "
                         f'{", ".join(SLOTS)})')
      slots[slot] = part
    return compose(get_algorithm(base), **slots)
  raise ValueError(
      f'unknown algorithm {show(name)}; allowed: {", ".join(ALGORITHMS)}'
      " (or a preset with parts in its slots: 'laq+server=adam')")
