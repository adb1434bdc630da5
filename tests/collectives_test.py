"""laq_jax.collectives: sums whose order is fixed by the code.

Each sum is checked bit for bit against the same order written out as a
Python loop over NumPy scalars (left to right over the workers; pairwise
halving over the last axis), on data whose cancellations make the order
visible, so a reduce in another order fails. The devices path (workers split
over forced CPU devices under `jax.shard_map`) runs in a subprocess, since
the device count is fixed before jax is imported.
"""

import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from tests import common

sum_workers_jit = jax.jit(collectives.sum_workers)
fixed_sum_jit = jax.jit(collectives.fixed_sum)
sum_sq_jit = jax.jit(collectives.sum_sq)


def left_to_right(rows):
  """((r0 + r1) + r2) + ..., elementwise, in the rows' own dtype."""
  total = rows[0].copy()
  for row in rows[1:]:
    total = total + row
  return total


def pairwise(values):
  """The pairwise-halving sum of a 1-D array of NumPy scalars, as Python:
  pad to even with a zero, add neighbours, repeat."""
  values = list(values)
  zero = values[0].dtype.type(0)
  while len(values) > 1:
    if len(values) % 2:
      values.append(zero)
    values = [values[i] + values[i + 1] for i in range(0, len(values), 2)]
  return values[0]


def wide_range(rng, shape, dtype):
  """Values from 1e-8 to 1e8 of both signs: sums whose rounding depends on
  the order of the additions."""
  magnitude = 10.0 ** rng.uniform(-8, 8, size=shape)
  return (rng.choice([-1.0, 1.0], size=shape) * magnitude).astype(dtype)


class SumWorkersTest(parameterized.TestCase):

  @parameterized.product(dtype=[np.float32, np.float64],
                         shape=[(7,), (5, 13), (3, 2, 4)])
  def test_left_to_right_bit_for_bit(self, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    x = wide_range(rng, shape, dtype)
    got = np.asarray(sum_workers_jit(jnp.asarray(x)))
    want = left_to_right(list(x))
    self.assertEqual(got.dtype, dtype)
    self.assertEqual(got.shape, shape[1:])
    np.testing.assert_array_equal(got, want)

  def test_the_order_is_visible_in_the_data(self):
    # 1e16 + 1 rounds back to 1e16 in float64, so left to right gives 1
    # where (1e16 + 1) + (-1e16 + 1) in pairs gives 0: a sum in another
    # order would fail the bit-for-bit test above on such data.
    x = np.array([1e16, 1.0, -1e16, 1.0])
    self.assertEqual(float(sum_workers_jit(jnp.asarray(x))), 1.0)
    self.assertEqual(float(fixed_sum_jit(jnp.asarray(x))), 0.0)

  def test_one_worker_is_its_row(self):
    x = np.array([[1.5, -2.0, 3.25]])
    np.testing.assert_array_equal(sum_workers_jit(jnp.asarray(x)), x[0])

  def test_gather_without_a_mesh_is_the_input(self):
    x = jnp.arange(6.0).reshape(3, 2)
    self.assertIs(collectives.gather_workers(x), x)


class FixedSumTest(parameterized.TestCase):

  @parameterized.product(dtype=[np.float32, np.float64],
                         length=[1, 2, 3, 5, 8, 13, 16, 17, 64, 100, 257,
                                 4097, 7850],
                         form=[None, *collectives.FORMS])
  def test_pairwise_halving_bit_for_bit(self, dtype, length, form):
    # every form (None: the platform's) the same bits as the Python loop;
    # a fresh jit per form (a traced function keeps its first trace's form)
    rng = np.random.default_rng(length)
    x = wide_range(rng, (3, length), dtype)
    with collectives.form(form):
      got = np.asarray(jax.jit(lambda v: collectives.fixed_sum(v))(
          jnp.asarray(x)))
    self.assertEqual(got.shape, (3,))
    self.assertEqual(got.dtype, dtype)
    for row in range(3):
      self.assertEqual(got[row], pairwise(x[row]), (row, length, form))

  @parameterized.parameters(*collectives.FORMS)
  def test_the_gradient_is_the_cotangent_in_every_form(self, form):
    # d/dx of a sum is 1 in every entry; forward over reverse (a Hessian-
    # vector product, as problems/optimum.py takes) goes through as well
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(2, 300)).astype(np.float32))
    with collectives.form(form):
      grad = jax.jit(jax.grad(lambda v: collectives.fixed_sum(
          jnp.square(v)).sum()))(x)
      hvp = jax.jit(lambda v, t: jax.jvp(jax.grad(lambda w: collectives.
                                                  fixed_sum(w**3).sum()),
                                         (v,), (t,))[1])(x, jnp.ones_like(x))
    np.testing.assert_array_equal(grad, 2 * x)
    np.testing.assert_allclose(hvp, 6 * x, rtol=1e-6)

  def test_a_run_is_the_same_bits_in_either_form(self):
    # a LAQ run's trace and parameters, its sums grouped (a GPU's program)
    # and one level at a time (a CPU's), compiled apart
    import laq_jax  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    data = laq_jax.Data(
        jnp.asarray(rng.normal(size=(4, 30, 50)).astype(np.float32)),
        jnp.asarray(rng.integers(0, 10, (4, 30)).astype(np.int32)))
    spec = laq_jax.RunSpec(laq_jax.get_problem('mlp', 50, 10), 4)
    hyper = laq_jax.make_hyper('laq', dtype=jnp.float32)
    runs = []
    for form in collectives.FORMS:
      with collectives.form(form):
        state = laq_jax.init_state(spec, hyper, jnp.float32)
        fn = jax.jit(laq_jax.loop.scan_chunk, static_argnums=(0, 4))
        runs.append(jax.tree.map(np.asarray,
                                 fn(spec, state, data, hyper, 12)))
    jax.tree.map(np.testing.assert_array_equal, *runs)
    self.assertGreater(int(runs[0][1].sent_M.sum()), 0)

  def test_an_unknown_form_is_refused_by_name(self):
    with self.assertRaisesRegex(ValueError, "'tree'.*halving, grouped"):
      with collectives.form('tree'):
        pass

  def test_hand_worked_odd_length(self):
    # [a, b, c, d, e] -> [a+b, c+d, e+0] -> [(a+b)+(c+d), e+0] -> one value.
    x = jnp.array([1.0, 2.0, 4.0, 8.0, 16.0])
    self.assertEqual(float(fixed_sum_jit(x)), 31.0)
    self.assertEqual(float(fixed_sum_jit(jnp.array([[2.5]]))[0]), 2.5)

  def test_same_bits_whatever_the_batch_around_it(self):
    # A worker's norm must not depend on how many workers share its program
    # (vmapped on one device, or split over several): the row alone, the
    # rows batched, and the rows vmapped give the same bits.
    rng = np.random.default_rng(0)
    x = wide_range(rng, (6, 159), np.float32)
    batched = np.asarray(fixed_sum_jit(jnp.asarray(x)))
    vmapped = np.asarray(jax.jit(jax.vmap(collectives.fixed_sum))(
        jnp.asarray(x)))
    for m in range(6):
      alone = np.asarray(fixed_sum_jit(jnp.asarray(x[m])))
      self.assertEqual(alone, batched[m])
      self.assertEqual(alone, vmapped[m])

  @parameterized.parameters(np.float32, np.float64)
  def test_sum_sq_is_the_pairwise_sum_of_squares(self, dtype):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 37)).astype(dtype)
    got = np.asarray(sum_sq_jit(jnp.asarray(x)))
    for row in range(4):
      self.assertEqual(got[row], pairwise(x[row] * x[row]))
    np.testing.assert_allclose(got, np.sum(x.astype(np.float64)**2, axis=1),
                               rtol=1e-5 if dtype == np.float32 else 1e-13)


# Workers split over 4 forced CPU devices: the sum over the gathered workers
# equals the vmapped single-device sum and the Python left-to-right sum, bit
# for bit, and the gather returns every worker in global order.
_DEVICES_SCRIPT = textwrap.dedent('''
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    jax.config.update('jax_enable_x64', True)
    from laq_jax import collectives
    from tests import collectives_test as t
    assert jax.device_count() == 4, jax.devices()
    mesh = jax.make_mesh((4,), ('workers',))
    for dtype in (np.float32, np.float64):
      x = t.wide_range(np.random.default_rng(5), (8, 33), dtype)
      split = jax.device_put(x, NamedSharding(mesh, P('workers')))
      summed = jax.jit(jax.shard_map(
          lambda x: collectives.sum_workers(x, 'workers'), mesh=mesh,
          in_specs=P('workers'), out_specs=P()))(split)
      gathered = jax.jit(jax.shard_map(
          lambda x: collectives.gather_workers(x, 'workers'), mesh=mesh,
          in_specs=P('workers'), out_specs=P()))(split)
      norms = jax.jit(jax.shard_map(
          collectives.sum_sq, mesh=mesh, in_specs=P('workers'),
          out_specs=P('workers')))(split)
      vmapped = t.sum_workers_jit(jnp.asarray(x))
      np.testing.assert_array_equal(np.asarray(summed), np.asarray(vmapped))
      np.testing.assert_array_equal(np.asarray(summed),
                                    t.left_to_right(list(x)))
      np.testing.assert_array_equal(np.asarray(gathered), x)
      np.testing.assert_array_equal(np.asarray(norms),
                                    np.asarray(t.sum_sq_jit(jnp.asarray(x))))
    print('EQUAL')
''')


class DevicesTest(absltest.TestCase):

  def test_sum_over_devices_equals_the_vmapped_sum(self):
    out = common.run_script(
        _DEVICES_SCRIPT, JAX_PLATFORMS='cpu',
        XLA_FLAGS='--xla_force_host_platform_device_count=4')
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn('EQUAL', out.stdout)


if __name__ == '__main__':
  absltest.main()
