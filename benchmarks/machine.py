"""The machine: what it is, and the limits it reaches (matmul FLOP/s, read
bandwidth, memory a program may use)."""

from __future__ import annotations

import os
import platform
import subprocess

import jax
import numpy as np

from benchmarks.timing import time_interleaved
from experiments.run import roofline


def _lscpu_field(name: str) -> str | None:
  try:
    out = subprocess.run(['lscpu'], capture_output=True, text=True,
                         timeout=10).stdout
  except (OSError, subprocess.SubprocessError):
    return None
  for line in out.splitlines():
    if line.startswith(name + ':'):
      return line.split(':', 1)[1].strip()
  return None


def _meminfo(field: str) -> int | None:
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith(field + ':'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def describe_machine() -> dict:
  """CPU, memory, load, software and devices, for the report."""
  devices = jax.devices()
  return {
      'cpu_model': _lscpu_field('Model name') or platform.processor(),
      'cpu_count': os.cpu_count(),
      'cpus_usable': len(os.sched_getaffinity(0)),
      'threads_per_core': _lscpu_field('Thread(s) per core'),
      'l3_cache': _lscpu_field('L3 cache'),
      'hypervisor': _lscpu_field('Hypervisor vendor'),
      'mem_total_bytes': _meminfo('MemTotal'),
      'mem_available_bytes': _meminfo('MemAvailable'),
      'load_average_start': os.getloadavg(),
      'platform': platform.platform(),
      'python': platform.python_version(),
      'jax': jax.__version__,
      'jaxlib': getattr(jax.lib, '__version__', None) or _jaxlib_version(),
      'numpy': np.__version__,
      'backend': jax.default_backend(),
      'devices': [f'{d.platform}:{d.device_kind}' for d in devices],
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
  }


def _jaxlib_version():
  try:
    import jaxlib  # pylint: disable=g-import-not-at-top
    return jaxlib.__version__
  except Exception:  # pylint: disable=broad-except
    return None


def device_memory_limit() -> tuple[int | None, str]:
  """Bytes a program may use on the default device, and where that came from."""
  device = jax.devices()[0]
  try:
    stats = device.memory_stats()
  except Exception:  # pylint: disable=broad-except
    stats = None
  if stats and stats.get('bytes_limit'):
    return int(stats['bytes_limit']) - int(stats.get('bytes_in_use', 0)), (
        'device memory_stats: bytes_limit - bytes_in_use')
  return _meminfo('MemAvailable'), '/proc/meminfo MemAvailable (host RAM)'


# The probes are experiments.run.roofline's (the reproduction measures the
# same).
Probe = roofline.Probe
matmul_probe = roofline.matmul_probe
bandwidth_probe = roofline.bandwidth_probe


def bench_probe(probe: Probe, repeats: int) -> dict:
  """The probe's best time over `repeats` and the rate it reached."""
  times = time_interleaved({'probe': probe.fn}, repeats)['probe']
  return {'probe': probe.name, 'seconds': min(times), 'work': probe.work,
          'rate': probe.rate(min(times)), 'unit': probe.unit}

