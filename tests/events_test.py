"""experiments/run/events.py, read back with TensorBoard's own reader."""

import pathlib
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from laq_jax.record import Record
from tensorboard.backend.event_processing import event_accumulator

from experiments.run import events
from laq_jax import sweep as sweep_lib


def read(logdir) -> dict[str, dict[int, float]]:
  """{tag: {step: value}} of the scalars TensorBoard shows for `logdir`."""
  acc = event_accumulator.EventAccumulator(
      str(logdir), size_guidance={event_accumulator.SCALARS: 0,
                                  event_accumulator.TENSORS: 0})
  acc.Reload()
  return {tag: {e.step: e.value for e in acc.Scalars(tag)}
          for tag in acc.Tags()['scalars']}


def fake_run(num_steps, num_workers=3, seed=0):
  rng = np.random.default_rng(seed)
  loss = 5.0 + np.cumsum(-rng.random(num_steps))
  grad = rng.random(num_steps)
  sent = rng.random((num_steps, num_workers)) < 0.5
  bits = np.where(sent, 1000, 0).astype(np.int32)
  bits_down = np.full((num_steps, num_workers), 32 * 7, np.int32)
  return loss, grad, sent, bits, bits_down


def rec(loss, grad, sent, bits, bits_down):
  return Record.from_arrays(loss=loss, grad_norm_sq=grad, sent_M=sent,
                            bits_M=bits, bits_down_M=bits_down)


class EventsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp(prefix='laq_events_test_'))
    self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

  def test_every_step_and_tag_as_metrics_csv_has_them(self):
    loss, grad, sent, bits, bits_down = fake_run(25)
    e = events.Events(self.dir, 0, config={'algo': 'laq'}, fstar=1.5)
    e.at(0, accuracy=0.1)
    e.steps(0, rec(loss[:10], grad[:10], sent[:10], bits[:10], bits_down[:10]))
    e.at(10, accuracy=0.5)
    e.steps(10, rec(loss[10:], grad[10:], sent[10:], bits[10:], bits_down[10:]))
    e.at(25, accuracy=0.7, loss=0.25 + 1.5)
    e.close()
    got = read(self.dir)
    self.assertSameElements(got, events.TAGS)
    steps = list(range(25))
    # float32 in the event files.
    f32 = lambda a: np.asarray(a, np.float32).tolist()
    self.assertEqual([got['objective/loss'][k] for k in steps], f32(loss))
    self.assertEqual(got['objective/loss'][25], np.float32(1.75))
    np.testing.assert_allclose(
        [got['objective/residual'][k] for k in steps], loss - 1.5,
        rtol=1e-6)
    self.assertEqual(got['objective/residual'][25], np.float32(0.25))
    self.assertEqual([got['objective/grad_norm_sq'][k] for k in steps],
                     f32(grad))
    self.assertEqual([got['communication/uploads'][k] for k in steps],
                     np.cumsum(sent.sum(1)).tolist())
    self.assertEqual([got['communication/bits_up'][k] for k in steps],
                     np.cumsum(bits.sum(1)).tolist())
    self.assertEqual(got['communication/bits_down'][24], 25 * 3 * 32 * 7)
    self.assertEqual(got['eval/test_accuracy'],
                     {0: np.float32(0.1), 10: np.float32(0.5),
                      25: np.float32(0.7)})

  def test_a_restart_replaces_the_steps_from_where_it_starts(self):
    loss, grad, sent, bits, bits_down = fake_run(10)
    e = events.Events(self.dir, 0)
    e.steps(0, rec(loss, grad, sent, bits, bits_down))
    e.close()
    # Resumed at step 6 (a checkpoint there): steps 6.. are written again
    # (different values here, to see which ones TensorBoard keeps), the
    # totals continue from those of steps 0..5.
    before = [sent[:6].sum(), bits[:6].sum(), bits_down[:6].sum()]
    e = events.Events(self.dir, 6, totals=before)
    e.steps(6, rec(loss[6:] - 100, grad[6:], sent[6:], bits[6:], bits_down[6:]))
    e.close()
    got = read(self.dir)
    self.assertLen(got['objective/loss'], 10)
    np.testing.assert_allclose(
        [got['objective/loss'][k] for k in range(10)],
        np.concatenate([loss[:6], loss[6:] - 100]), rtol=1e-6)
    self.assertEqual(got['communication/uploads'][9], sent.sum())
    # A run started over (at 0) replaces everything.
    e = events.Events(self.dir, 0)
    e.steps(0, rec(loss[:3], grad[:3], sent[:3], bits[:3], bits_down[:3]))
    e.close()
    self.assertEqual(sorted(read(self.dir)['objective/loss']), [0, 1, 2])

  def test_sweep_a_folder_per_point_strided(self):
    num_steps, g = 5000, 2
    runs = [fake_run(num_steps, seed=s) for s in range(g)]
    result = sweep_lib.SweepResult(
        points=[{'algo': 'laq', 'bits': 2}, {'algo': 'lag', 'bits': 2}],
        loss_GxT=np.stack([r[0] for r in runs]),
        grad_norm_sq_GxT=np.stack([r[1] for r in runs]),
        sent_GxTxM=np.stack([r[2] for r in runs]),
        bits_GxTxM=np.stack([r[3] for r in runs]),
        bits_down_GxTxM=np.stack([r[4] for r in runs]),
        final_loss_G=np.array([1.0, 2.0]), theta_GxP=np.zeros((g, 4)))
    events.write_sweep(self.dir, result.points, ['algo'], result,
                       [None, None], [0.9, 0.8], {'num_iters': num_steps})
    folders = sorted(p.name for p in self.dir.iterdir())
    self.assertEqual(folders, ['000_algo=laq', '001_algo=lag'])
    got = read(self.dir / '001_algo=lag')
    self.assertNotIn('objective/residual', got)  # no f*
    stride = 3  # ceil(5000 / 2000)
    want_steps = [k for k in range(num_steps) if k % stride == 0] + [
        num_steps - 1]
    self.assertEqual(sorted(got['communication/uploads']), want_steps)
    # Cumulative over every step, not only the written ones.
    self.assertEqual(got['communication/uploads'][num_steps - 1],
                     runs[1][2].sum())
    self.assertEqual(got['eval/test_accuracy'], {num_steps: np.float32(0.8)})
    self.assertEqual(got['objective/loss'][num_steps], 2.0)

  def test_point_folder_names_are_safe(self):
    self.assertEqual(events.point_folder(7, {'algo': 'laq', 'xi': 0.8,
                                             'name': 'a b/c'},
                                         ['algo', 'xi', 'name']),
                     '007_algo=laq,xi=0.8,name=a_b_c')
    self.assertEqual(events.point_folder(0, {'algo': 'laq'}, []),
                     '000_point')


if __name__ == '__main__':
  absltest.main()
