"""The modeled network as data: the `Network` record, its fields and what
each allows, and the named profiles with their sources. ::

    net = make_network('mobile', num_workers=10, up_bps=5e6)

`laq_jax.network` (the simulated clock: a round's time, a run's replay)
re-exports every name here, so `network.make_network`, `network.Network`
and `network.PROFILES` keep working. The contract is docs/algorithm.md,
"Time on a modeled network".
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax.show import show

STRAGGLERS = ('none', 'exp', 'lognormal')
TOPOLOGIES = ('star', 'ring')
# The fields that may differ per worker ([M]; a scalar is every worker's).
PER_WORKER_FIELDS = ('up_bps', 'down_bps', 'up_latency_s', 'down_latency_s',
                     'flops_per_s')


class Network(NamedTuple):
  """A network as arrays (float64 where x64 is on; see `make_network`).

  Attributes:
    up_bps, down_bps: each worker's uplink and downlink bandwidth, bits/s
      ([M] or a scalar for all; > 0, inf: no limit).
    up_latency_s, down_latency_s: one-way latency, s (>= 0, finite).
    flops_per_s: each worker's sustained gradient compute rate (> 0, inf:
      compute is free).
    straggler: index into STRAGGLERS (int32).
    straggler_scale: the exp mean, or the lognormal sigma (>= 0, finite).
    server_in_bps, server_out_bps: the server's ingress and egress, bits/s
      (> 0, inf: not a bottleneck).
    topology: index into TOPOLOGIES (int32).
  """
  up_bps: Any
  down_bps: Any
  up_latency_s: Any
  down_latency_s: Any
  flops_per_s: Any
  straggler: Any
  straggler_scale: Any
  server_in_bps: Any
  server_out_bps: Any
  topology: Any


FIELDS = Network._fields
# One line per field (configs/default.py and `laq_jax.hyper.describe`).
DOCS = {
    'up_bps': "each worker's uplink bandwidth, bits/s",
    'down_bps': "each worker's downlink bandwidth, bits/s",
    'up_latency_s': 'one-way latency of an upload, s',
    'down_latency_s': 'one-way latency of the broadcast, s',
    'flops_per_s': "each worker's sustained gradient compute rate, FLOP/s",
    'straggler': f'the compute slowdown law: {", ".join(STRAGGLERS)}',
    'straggler_scale': "the slowdown's scale (exp: mean of s - 1; "
                       'lognormal: sigma of log s)',
    'server_in_bps': "the server's ingress, bits/s",
    'server_out_bps': "the server's egress, bits/s",
    'topology': f'how the round aggregates: {", ".join(TOPOLOGIES)} (ring: '
                'gd, sgd only)',
}
_POSITIVE = ('up_bps', 'down_bps', 'flops_per_s', 'server_in_bps',
             'server_out_bps')
_NONNEGATIVE_FINITE = ('up_latency_s', 'down_latency_s', 'straggler_scale')

# Named profiles. Every figure's source is in SOURCES and docs/algorithm.md.
PROFILES: dict[str, dict[str, Any]] = {
    # An accelerator cluster: A100s on 200 Gbit/s InfiniBand/Ethernet.
    'datacenter': dict(up_bps=200e9, down_bps=200e9, up_latency_s=1e-6,
                       down_latency_s=1e-6, flops_per_s=19.5e12,
                       straggler='none', straggler_scale=0.0,
                       server_in_bps=200e9, server_out_bps=200e9,
                       topology='star'),
    # Institutions or cloud regions: server CPUs on 1 Gbit/s links across
    # a continent or an ocean.
    'cross_silo': dict(up_bps=1e9, down_bps=1e9, up_latency_s=0.040,
                       down_latency_s=0.040, flops_per_s=3.6e12,
                       straggler='none', straggler_scale=0.0,
                       server_in_bps=1e9, server_out_bps=1e9,
                       topology='star'),
    # Phones on LTE: a slow uplink, CPU training, heterogeneous devices.
    'mobile': dict(up_bps=6.3e6, down_bps=21.3e6, up_latency_s=0.055,
                   down_latency_s=0.055, flops_per_s=22.5e9,
                   straggler='lognormal', straggler_scale=0.5,
                   server_in_bps=math.inf, server_out_bps=math.inf,
                   topology='star'),
}
# Where each figure comes from (docs/algorithm.md has the quotes).
SOURCES: dict[str, dict[str, str]] = {
    'datacenter': {
        'up_bps': 'NVIDIA ConnectX-6 EN user manual: "up to two ports of '
                  '200Gb/s"',
        'up_latency_s': 'ConnectX-6 EN: "sub-600ns latency"; osu_latency '
                        'runs: 0.9-1.2 us one-way for 0 bytes',
        'flops_per_s': 'NVIDIA A100 datasheet: FP32 19.5 TFLOP/s (peak)',
        'server_in_bps': 'the server has one such 200 Gbit/s port',
    },
    'cross_silo': {
        'up_bps': 'AWS Direct Connect link of 1 Gbit/s (P. Allen, Cornell '
                  'Cloudification blog, 2016): a capacity, an upper bound',
        'up_latency_s': '"Latency Between AWS Global Regions": US-East to '
                        'Ireland 80.6 ms round trip, halved',
        'flops_per_s': 'Intel Cascade Lake SP (Microway specifications): 28 '
                       'cores x 2 AVX-512 FMA units x 32 FP32 FLOP/cycle at '
                       '2.0 GHz = 3.6 TFLOP/s (derived from the per-cycle '
                       'figures)',
        'server_in_bps': 'the server on one such 1 Gbit/s link',
        'context': 'Kairouz et al. 2021, Advances and Open Problems in FL, '
                   'Table 1.1: cross-silo, "Typically 2-100 clients"',
    },
    'mobile': {
        'up_bps': 'Opensignal, State of Mobile: USA, May 2019 (Q1 2019): '
                  '"average upload speeds of 6.3 Mbps"',
        'down_bps': 'the same report: download 21.3 Mbps',
        'up_latency_s': 'the same report: "latency ... ranged from 44.1ms to '
                        '66.4ms" (the middle, 55 ms, taken as one-way; '
                        'Opensignal measures round trips, so this may be up '
                        'to 2x pessimistic)',
        'flops_per_s': 'Das et al. 2022, Enabling On-Device Smartphone GPU '
                       'based Training (arXiv:2202.10100): CPUs 15-30 '
                       'GFLOP/s on Snapdragon 8 (the middle, 22.5)',
        'straggler_scale': 'Yang et al., WWW 2021 (FLASH, '
                           'device_util.py): per-batch training times of '
                           'three device classes 1642 / 588 / 179 ms '
                           '(FEMNIST CNN) with population weights; a '
                           'lognormal fit gives sigma 0.37-0.69 (ours: 0.5)',
        'server_in_bps': 'a cloud server: not the bottleneck (an '
                         'assumption, no source)',
    },
}


def allowed(name: str) -> str:
  """What field `name` allows, in words (for error messages)."""
  if name in _POSITIVE:
    return 'a number > 0 (inf: no limit), not NaN'
  if name in _NONNEGATIVE_FINITE:
    return 'a finite number >= 0'
  if name == 'straggler':
    return f'one of {", ".join(STRAGGLERS)}'
  return f'one of {", ".join(TOPOLOGIES)}'


def check_field(name: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is allowed for Network field `name`
  (every element of an array), naming the field, the value and what is
  allowed."""
  where = where or name
  if name not in FIELDS:
    raise ValueError(f'unknown network field {show(name)}; allowed: '
                     f'{", ".join(FIELDS)}')
  bad = ValueError(f'{where}={show(value)} is not allowed: it must be '
                   f'{allowed(name)}')
  if name in ('straggler', 'topology'):
    names = STRAGGLERS if name == 'straggler' else TOPOLOGIES
    if not (isinstance(value, str) and value in names):
      raise bad
    return
  if isinstance(value, (str, bytes, bool, np.bool_)):
    raise bad
  try:
    a = np.asarray(value, np.float64)
  except (TypeError, ValueError):
    raise bad from None
  if a.size == 0 or np.any(np.isnan(a)):
    raise bad
  if name in _POSITIVE and not np.all(a > 0):
    raise bad
  if name in _NONNEGATIVE_FINITE and not np.all(np.isfinite(a) & (a >= 0)):
    raise bad
  if name == 'straggler_scale' and a.ndim:
    raise bad
  if name in ('server_in_bps', 'server_out_bps') and a.ndim:
    raise bad


def make_network(profile: str = 'cross_silo', *,
                 num_workers: int | None = None, dtype=None,
                 **overrides) -> Network:
  """The Network of a named profile, with any field overridden.

  Args:
    profile: one of PROFILES.
    num_workers: M, to give every per-worker field the shape [M] (a list
      override must have M entries); None leaves scalars scalar.
    dtype: the float dtype (default float64 when x64 is on, else float32).
    **overrides: any field of Network (`straggler` and `topology` by name).

  Raises:
    ValueError: an unknown profile or field, or a value not allowed (named,
      with what is allowed).
  """
  if num_workers is not None and (
      isinstance(num_workers, (bool, np.bool_))
      or not isinstance(num_workers, (int, np.integer)) or num_workers < 1):
    raise ValueError(f'num_workers={show(num_workers)} is not allowed: it '
                     'must be an integer >= 1, or None (scalar fields)')
  if not isinstance(profile, str) or profile not in PROFILES:
    raise ValueError(f'unknown network profile {show(profile)}; allowed: '
                     f'{", ".join(PROFILES)}')
  unknown = sorted(set(overrides) - set(FIELDS))
  if unknown:
    raise ValueError(f'unknown network field(s) {unknown}; allowed: '
                     f'{", ".join(FIELDS)}')
  values = {**PROFILES[profile], **overrides}
  for name, value in values.items():
    check_field(name, value, f'network.{name}')
  if dtype is None:
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
  out = {}
  for name in FIELDS:
    value = values[name]
    if name == 'straggler':
      out[name] = jnp.int32(STRAGGLERS.index(value))
    elif name == 'topology':
      out[name] = jnp.int32(TOPOLOGIES.index(value))
    else:
      a = np.asarray(value, np.float64)
      if name in PER_WORKER_FIELDS and num_workers is not None:
        if a.ndim == 0:
          a = np.full((num_workers,), float(a))
        elif a.shape != (num_workers,):
          raise ValueError(f'network.{name} has {a.size} values: it must be '
                           f'one number or one per worker ({num_workers})')
      out[name] = jnp.asarray(a, dtype)
  return Network(**out)


def describe(network: Network, profile: str | None = None) -> dict:
  """The network as JSON (summary.json's `network`): every field (lists
  for per-worker ones, 'inf' as a string), and the profile's name."""
  out = {'profile': profile}
  for name, value in zip(FIELDS, network):
    if name == 'straggler':
      out[name] = STRAGGLERS[int(value)]
    elif name == 'topology':
      out[name] = TOPOLOGIES[int(value)]
    else:
      a = np.asarray(value, np.float64)
      as_json = lambda x: x if math.isfinite(x) else str(x)
      out[name] = ([as_json(float(x)) for x in a] if a.ndim
                   else as_json(float(a)))
  return out


def as_mapping(network: Network) -> Mapping[str, np.ndarray]:
  """{field: NumPy array} (for files)."""
  return {n: np.asarray(v) for n, v in zip(FIELDS, network)}
