"""Subprocess for multiprocess_test: one process of a multi-process run.

    LAQ_JAX_COORDINATOR=127.0.0.1:PORT LAQ_JAX_NUM_PROCESSES=2 \
    LAQ_JAX_PROCESS_ID=i \
    python tests/_multiprocess_worker.py distributed OUT_DIR

runs the small LAQ run on the global 8-device mesh (4 forced CPU devices per
process, gloo collectives); only process 0 writes OUT_DIR/result-0.npz.

    python tests/_multiprocess_worker.py reference OUT_DIR

runs the same problem in one process on one device (the vmap path) and
writes OUT_DIR/reference.npz.
"""

import os
import sys

MODE, OUT_DIR = sys.argv[1], sys.argv[2]
LOCAL_DEVICES = 4
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count='
                           f'{LOCAL_DEVICES if MODE == "distributed" else 1}')
os.environ['JAX_PLATFORMS'] = 'cpu'

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import laq_jax as lj  # pylint: disable=g-import-not-at-top
from laq_jax import distributed  # pylint: disable=g-import-not-at-top
from laq_jax import sharding  # pylint: disable=g-import-not-at-top
from tests import common  # pylint: disable=g-import-not-at-top

M, PER_WORKER, STEPS, CHUNK = 8, 64, 24, 8


def problem():
  x, y = common.mnist_shards(M, PER_WORKER, np.float64)
  spec = lj.RunSpec(lj.get_problem('logreg'), M)
  hyper = lj.make_hyper('laq', dtype=jnp.float64, step_size=0.02, bits=4)
  return spec, lj.Data(x, y), hyper


def main():
  if MODE == 'distributed':
    # The coordinator, process count and id come from $LAQ_JAX_*; joining
    # comes before any other JAX work.
    assert distributed.maybe_initialize(initialization_timeout=60)
  # float64, turned on once at startup as the launchers do.
  jax.config.update('jax_enable_x64', True)
  if MODE == 'distributed':
    # The global view of the devices.
    assert jax.process_count() == 2, jax.process_count()
    assert jax.local_device_count() == LOCAL_DEVICES
    assert jax.device_count() == 2 * LOCAL_DEVICES
  spec, data, hyper = problem()
  if MODE == 'reference':
    assert jax.device_count() == 1, jax.devices()
    state, trace = lj.run(spec, lj.Data(jnp.asarray(data.x_MxNxD),
                                        jnp.asarray(data.y_MxN)), hyper, STEPS)
  else:
    mesh = sharding.make_mesh()  # all 8 devices of both processes
    data = sharding.shard_data(data, mesh)
    local = {s.data.shape for s in data.x_MxNxD.addressable_shards}
    assert local == {(1, PER_WORKER, 784)}, local
    assert len(data.x_MxNxD.addressable_shards) == LOCAL_DEVICES
    state, trace = lj.run(spec, data, hyper, STEPS, chunk_size=CHUNK,
                          run_chunk_fn=sharding.make_run_chunk(mesh))
  theta = np.asarray(state.theta_P)  # replicated: readable on every process
  assert theta.dtype == np.float64, theta.dtype
  if distributed.is_writer():
    name = ('reference.npz' if MODE == 'reference'
            else f'result-{jax.process_index()}.npz')
    np.savez(os.path.join(OUT_DIR, name), loss=trace.loss, sent=trace.sent_M,
             bits=trace.bits_M, theta=theta,
             process_count=jax.process_count())
  if MODE == 'distributed':
    distributed.shutdown()


if __name__ == '__main__':
  main()
