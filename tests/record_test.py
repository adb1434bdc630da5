"""laq_jax.record: the one trace record and its per-step totals.

The totals over the workers and their running sums against Python loops over
the steps (int64, past int32), joins along time and along the grid against
the arrays concatenated by hand, and the record's refusals.
"""

import types

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import record as record_lib
from laq_jax.record import Record


def arrays(num_steps, num_workers, seed=0, grid=None, with_time=True):
  """Random arrays of every RECORDED field ([G,] T[, M])."""
  rng = np.random.default_rng(seed)
  lead = () if grid is None else (grid,)
  t, tm = lead + (num_steps,), lead + (num_steps, num_workers)
  sent = rng.random(tm) < 0.6
  out = dict(
      loss=rng.normal(size=t), grad_norm_sq=rng.random(t), sent_M=sent,
      bits_M=np.where(sent, rng.integers(1, 2**31 - 1, tm), 0).astype(
          np.int32),
      bits_down_M=rng.integers(0, 2**31 - 1, tm).astype(np.int32),
      participants_M=rng.random(tm) < 0.9, dropped_M=rng.random(tm) < 0.1,
      grads_M=rng.integers(0, 3, tm).astype(np.int32))
  if with_time:
    out.update(time_s=rng.random(t), slowest=rng.integers(0, num_workers, t),
               slowdown_M=1 + rng.random(tm))
  return out


def loop_totals(per_worker_TxM):
  """Per-step sums over the workers and their running sums, one Python int
  at a time (no overflow, no NumPy reduction)."""
  totals, running, acc = [], [], 0
  for row in per_worker_TxM:
    step = sum(int(v) for v in row)
    acc += step
    totals.append(step)
    running.append(acc)
  return totals, running


class TotalsTest(parameterized.TestCase):

  def test_totals_and_running_sums_against_a_loop(self):
    a = arrays(9, 5)
    r = Record.from_arrays(**a)
    for name, per_worker in (('uploads', 'sent_M'), ('bits', 'bits_M'),
                             ('bits_down', 'bits_down_M')):
      totals, running = loop_totals(a[per_worker])
      self.assertEqual(getattr(r, name).tolist(), totals, name)
      self.assertEqual(getattr(r, f'cum_{name}').tolist(), running, name)
      self.assertEqual(getattr(r, name).dtype, np.int64)
      self.assertEqual(getattr(r, f'cum_{name}').dtype, np.int64)
    # Five workers of up to 2^31 - 1 bits: past int32 in the first step.
    self.assertGreater(r.cum_bits[-1], 2**31)
    cum_time = 0.0
    for k, step in enumerate(a['time_s']):
      cum_time += step
      self.assertAlmostEqual(r.cum_time_s[k], cum_time, delta=1e-12)

  def test_a_sweep_sums_each_point_on_its_own(self):
    a = arrays(6, 3, grid=4)
    r = Record.from_arrays(**a)
    self.assertEqual(r.cum_bits.shape, (4, 6))
    for g in range(4):
      totals, running = loop_totals(a['bits_M'][g])
      self.assertEqual(r.bits[g].tolist(), totals)
      self.assertEqual(r.cum_bits[g].tolist(), running)
    self.assertEqual((r.num_steps, r.num_workers), (6, 3))

  def test_per_step_sums_a_per_worker_field_only(self):
    a = arrays(4, 3)
    r = Record.from_arrays(**a)
    np.testing.assert_allclose(
        r.per_step('slowdown_M'),
        [sum(row) for row in a['slowdown_M']], rtol=1e-15)
    np.testing.assert_array_equal(r.per_step('loss'), a['loss'])

  def test_hand_worked_two_workers(self):
    r = Record.from_arrays(loss=[3.0, 2.0, 1.0],
                           sent_M=[[1, 0], [1, 1], [0, 0]],
                           bits_M=[[10, 0], [10, 20], [0, 0]])
    self.assertEqual(r.sent_M.dtype, bool)  # 0/1 given, stored as who sent
    self.assertEqual(r.uploads.tolist(), [1, 2, 0])
    self.assertEqual(r.cum_uploads.tolist(), [1, 3, 3])
    self.assertEqual(r.cum_bits.tolist(), [10, 40, 40])
    # The optional fields left out: None, and no totals of them.
    self.assertIsNone(r.bits_down)
    self.assertIsNone(r.cum_bits_down)
    self.assertIsNone(r.cum_time_s)
    self.assertEqual(sorted(r.arrays()), ['bits_M', 'loss', 'sent_M'])


class JoinTest(parameterized.TestCase):

  @parameterized.parameters(None, 3)
  def test_join_is_concatenation_along_time(self, grid):
    first, second = arrays(4, 2, seed=1, grid=grid), arrays(3, 2, seed=2,
                                                           grid=grid)
    joined = Record.join([Record.from_arrays(**first),
                          Record.from_arrays(**second)])
    time_axis = 0 if grid is None else 1
    for name in record_lib.RECORDED:
      np.testing.assert_array_equal(
          joined.fields[name],
          np.concatenate([first[name], second[name]], axis=time_axis), name)
    self.assertEqual(joined.num_steps, 7)
    # The running sums run on across the chunk boundary.
    whole = np.concatenate([first['bits_M'], second['bits_M']], time_axis)
    rows = whole if grid is None else whole[0]
    self.assertEqual((joined.cum_bits if grid is None else
                      joined.cum_bits[0]).tolist(), loop_totals(rows)[1])

  def test_empty_then_a_chunk_is_the_chunk(self):
    a = arrays(3, 4)
    joined = Record.join([Record.empty(4), Record.from_arrays(**a)])
    for name in record_lib.RECORDED:
      np.testing.assert_array_equal(joined.fields[name], a[name])
    empty = Record.empty(4)
    self.assertEqual((empty.num_steps, empty.num_workers), (0, 4))
    self.assertEqual(empty.bits_M.shape, (0, 4))
    self.assertEqual(empty.cum_bits.tolist(), [])

  def test_a_field_one_record_lacks_is_left_out(self):
    with_time = Record.from_arrays(**arrays(2, 2, seed=3))
    without = Record.from_arrays(**arrays(2, 2, seed=4, with_time=False))
    joined = Record.join([with_time, without])
    self.assertIsNone(joined.time_s)
    self.assertIsNone(joined.slowdown_M)
    self.assertEqual(joined.bits_M.shape, (4, 2))

  def test_concat_points_stacks_the_grid(self):
    a, b = arrays(5, 2, seed=5, grid=2), arrays(5, 2, seed=6, grid=1)
    both = Record.concat_points([Record.from_arrays(**a),
                                 Record.from_arrays(**b)])
    self.assertEqual(both.sent_M.shape, (3, 5, 2))
    np.testing.assert_array_equal(both.loss[2], b['loss'][0])
    np.testing.assert_array_equal(both.bits_M[:2], a['bits_M'])

  def test_head_and_point(self):
    a = arrays(6, 3, seed=7, grid=4)
    r = Record.from_arrays(**a)
    head = r.head(2)
    np.testing.assert_array_equal(head.bits_M, a['bits_M'][:, :2])
    np.testing.assert_array_equal(head.loss, a['loss'][:, :2])
    one = r.point(3)
    np.testing.assert_array_equal(one.sent_M, a['sent_M'][3])
    self.assertEqual(one.cum_bits.tolist(), loop_totals(a['bits_M'][3])[1])
    some = r.point(np.array([2, 0]))
    np.testing.assert_array_equal(some.loss, a['loss'][[2, 0]])


class FieldsTest(absltest.TestCase):

  def test_of_keeps_the_recorded_fields_of_a_trace(self):
    a = arrays(3, 2, seed=8)
    trace = types.SimpleNamespace(**a, innovation_M=np.ones((3, 2)),
                                  threshold_M=np.ones((3, 2)))
    r = Record.of(trace)
    self.assertEqual(sorted(r.arrays()), sorted(record_lib.RECORDED))
    with self.assertRaises(AttributeError):
      r.innovation_M  # pylint: disable=pointless-statement

  def test_refusals_name_the_field(self):
    with self.assertRaisesRegex(ValueError, r"unknown recorded field\(s\) "
                                r"\['bitz_M'\]; allowed: loss, grad_norm_sq"):
      Record.from_arrays(loss=[1.0], sent_M=[[1]], bits_M=[[1]],
                         bitz_M=[[1]])
    with self.assertRaisesRegex(ValueError, "a Record needs 'bits_M'"):
      Record.from_arrays(loss=[1.0], sent_M=[[1]])

  def test_per_worker_names(self):
    self.assertEqual([n for n in record_lib.RECORDED
                      if record_lib.per_worker(n)],
                     ['sent_M', 'bits_M', 'bits_down_M', 'slowdown_M',
                      'participants_M', 'dropped_M', 'grads_M'])
    self.assertEqual(record_lib.extras(),
                     record_lib.RECORDED[len(record_lib.STANDARD):])


if __name__ == '__main__':
  absltest.main()
