"""Tests of laq_jax/devices/checkpoint.py: round trip, the last few kept, fingerprint.

The state saved is a real LAQ run's after 6 steps (every field non-trivial,
so a field lost on the way would show); what comes back must equal it bit
for bit, with its dtypes.
"""

import dataclasses
import pathlib
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

import laq_jax
from laq_jax import checkpoint
from laq_jax import sweep as sweep_lib
from tests import common

_tmp = None


def setUpModule():
  global _tmp
  _tmp = tempfile.TemporaryDirectory(prefix='laq_checkpoint_test_')


def tearDownModule():
  _tmp.cleanup()


class CheckpointerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    x, y = common.mnist_shards(4, 30, np.float64)
    cls.spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), 4, memory=3)
    cls.hyper = laq_jax.make_hyper('laq', dtype=jnp.float64)
    cls.state, cls.trace = laq_jax.run(
        cls.spec, laq_jax.Data(jnp.asarray(x), jnp.asarray(y)), cls.hyper, 6)
    cls.like = laq_jax.init_state(cls.spec, cls.hyper, jnp.float64)

  def folder(self, name):
    return pathlib.Path(_tmp.name, name)

  def test_round_trip_and_keep(self):
    state, trace = self.state, self.trace
    # Every field is non-trivial, so a field lost on the way would show.
    self.assertEqual(int(state.step), 6)
    self.assertTrue(np.all(np.asarray(state.rule.history_D) > 0))
    self.assertTrue(np.any(np.asarray(state.rule.clock_M) > 0))
    self.assertTrue(np.any(np.asarray(state.rule.last_error_M) > 0))
    arrays = {'loss': trace.loss, 'sent': trace.sent_M, 'bits': trace.bits_M}
    with checkpoint.Checkpointer(self.folder('unit'), 'abc', keep=2) as ckpt:
      self.assertIsNone(ckpt.restore(self.like))
      self.assertIsNone(ckpt.latest_step())
      for step in (2, 4, 6):
        ckpt.save(step, state, arrays, meta={'note': step, 'x': 0.1 + 0.2})
      self.assertEqual(ckpt.steps(), [4, 6])
      self.assertEqual(ckpt.latest_step(), 6)
      restored = ckpt.restore(self.like)
      older = ckpt.restore(self.like, step=4)
    self.assertEqual(restored.step, 6)
    common.assert_trees_equal(self, restored.state, state)
    self.assertIsInstance(restored.state, laq_jax.LoopState)
    for name, value in arrays.items():
      self.assertEqual(restored.arrays[name].dtype, value.dtype)
      np.testing.assert_array_equal(restored.arrays[name], value)
    self.assertEqual(restored.meta, {'note': 6, 'x': 0.1 + 0.2})
    self.assertEqual((older.step, older.meta['note']), (4, 4))
    # On disk: one folder per kept step.
    self.assertEqual(sorted(p.name for p in self.folder('unit').iterdir()
                            if not p.name.startswith('.')), ['4', '6'])
    # A new Checkpointer on the same folder finds them.
    with checkpoint.Checkpointer(self.folder('unit'), 'abc') as ckpt:
      self.assertEqual(ckpt.latest_step(), 6)
      common.assert_trees_equal(self, ckpt.restore(self.like).state, state)

  def test_memory_with_no_width_and_an_older_checkpoint_of_it(self):
    # Error feedback compiled out: its memory is [M, 0], which orbax cannot
    # save: it is left out and restored as the template's. A checkpoint of
    # an older version, where it had its full width, still resumes.
    x, y = common.mnist_shards(4, 30, np.float64)
    spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), 4, memory=3,
                           error_feedback=False)
    state, _ = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x), jnp.asarray(y)),
                           self.hyper, 3)
    like = laq_jax.init_state(spec, self.hyper, jnp.float64)
    self.assertEqual(state.rule.error_MxP.shape, (4, 0))
    wide = state._replace(rule=state.rule._replace(
        error_MxP=jnp.zeros((4, spec.problem.num_params()))))
    for name, saved in (('empty', state), ('older', wide)):
      with checkpoint.Checkpointer(self.folder(name), 'abc') as ckpt:
        ckpt.save(3, saved, {'loss': np.zeros(3)})
        common.assert_trees_equal(self, ckpt.restore(like).state, state)

  def test_no_upload_memory_and_an_older_checkpoint_with_it(self):
    # FedAvg's programs keep no last uploads (RunSpec.upload_memory): [M, 0]
    # left out of the checkpoint; one saved when they had their width (a
    # FedAvg run before it) still resumes.
    x, y = common.mnist_shards(4, 30, np.float64)
    points = [{'algo': 'fedavg', 'clients_per_round': 2}]
    spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), 4, memory=3,
                           stochastic=True, batch_size=5,
                           **sweep_lib.parts_of(points))
    hyper = laq_jax.make_hyper('fedavg', dtype=jnp.float64,
                               clients_per_round=2)
    state, _ = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x), jnp.asarray(y)),
                           hyper, 3)
    like = laq_jax.init_state(spec, hyper, jnp.float64)
    self.assertEqual(state.rule.last_upload_MxP.shape, (4, 0))
    wide = state._replace(rule=state.rule._replace(
        last_upload_MxP=jnp.ones((4, spec.problem.num_params()))))
    for name, saved in (('lean', state), ('wide', wide)):
      with checkpoint.Checkpointer(self.folder(name), 'abc') as ckpt:
        ckpt.save(3, saved, {'loss': np.zeros(3)})
        common.assert_trees_equal(self, ckpt.restore(like).state, state)

  def test_another_config_or_format_is_refused(self):
    arrays = {'loss': self.trace.loss}
    with checkpoint.Checkpointer(self.folder('other'), 'abc') as ckpt:
      ckpt.save(6, self.state, arrays)
    with checkpoint.Checkpointer(self.folder('other'), 'xyz') as ckpt:
      with self.assertRaisesRegex(checkpoint.CheckpointError,
                                  'saved by another config.*--overwrite'):
        ckpt.restore(self.like)
    with mock.patch.object(checkpoint, 'FORMAT', checkpoint.FORMAT - 1):
      with checkpoint.Checkpointer(self.folder('old'), 'abc') as ckpt:
        ckpt.save(6, self.state, arrays)
    with checkpoint.Checkpointer(self.folder('old'), 'abc') as ckpt:
      with self.assertRaisesRegex(checkpoint.CheckpointError,
                                  f'has format {checkpoint.FORMAT - 1}.*'
                                  f'reads format {checkpoint.FORMAT}'):
        ckpt.restore(self.like)

  def test_other_code_of_the_model_is_refused(self):
    # The same config, the model's code changed in between (a user's model
    # edited): its state would resume another objective.
    logreg = laq_jax.get_problem('logreg')
    edited = dataclasses.replace(
        logreg, apply=lambda params, x: 2.0 * logreg.apply(params, x))
    before, after = logreg.fingerprint(784), edited.fingerprint(784)
    self.assertNotEqual(before, after)
    self.assertEqual(before, laq_jax.get_problem('logreg').fingerprint(784))
    arrays = {'loss': self.trace.loss}
    with checkpoint.Checkpointer(self.folder('code'), 'abc',
                                 code=before) as ckpt:
      ckpt.save(6, self.state, arrays)
    with checkpoint.Checkpointer(self.folder('code'), 'abc',
                                 code=after) as ckpt:
      with self.assertRaisesRegex(
          checkpoint.CheckpointError, f'saved by other code of the model '
          rf"\(its loss's fingerprint {before}, now {after}: .*--overwrite"):
        ckpt.restore(self.like)
    for code in (before, None):  # the same code, or not checked
      with checkpoint.Checkpointer(self.folder('code'), 'abc',
                                   code=code) as ckpt:
        self.assertEqual(ckpt.restore(self.like).step, 6)

  def test_a_field_added_since_at_its_old_behaviour_resumes(self):
    """A checkpoint written before the schema grew `server_lr` (its config
    without the field, nor the slot fields that came after it) resumes
    under the same config, which now holds it at 0 (the preset's, the
    behaviour before it), and so does one written between the two, and one
    written with the first four slots before the estimator's; not under
    server_lr = 0.5."""
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    import configs  # pylint: disable=g-import-not-at-top
    now = configs.load('mnist_logreg', 'tiny').to_dict()
    self.assertEqual((now['server_lr'], now['init']), (0.0, 'default'))
    # (`client_batch` came last, `init` after every slot: the older eras
    # had neither)
    self.assertEqual((now['client_batch'], now['lstm']), (0, 'flax'))
    newest = dict(now)
    # (the `privacy` slot came last, after `lstm`)
    self.assertEqual(now['privacy'], '')
    before_privacy = {k: v for k, v in now.items() if k != 'privacy'}
    # (`lstm` came after `client_batch`)
    before_lstm = {k: v for k, v in before_privacy.items() if k != 'lstm'}
    before_batch = {k: v for k, v in before_lstm.items()
                    if k != 'client_batch'}
    now = before_batch
    now_without_init = {k: v for k, v in now.items() if k != 'init'}
    slots = ('compressor', 'trigger', 'server', 'client', 'estimator',
             'broadcast', 'compressor_b')
    self.assertEqual([now[s] for s in slots], [''] * 7)
    # (the estimator, broadcast and compressor_b slots came after the other
    # four)
    now = now_without_init
    four = {k: v for k, v in now.items() if k not in slots[4:]}
    between = {k: v for k, v in now.items() if k not in slots}
    before = {k: v for k, v in between.items() if k != 'server_lr'}
    now = newest
    arrays = {'loss': self.trace.loss}
    for era, written in (('before', before), ('between', between),
                         ('four slots', four),
                         ('every slot, before init', now_without_init),
                         ('before client_batch', before_batch),
                         ('before lstm', before_lstm),
                         ('before privacy', before_privacy)):
      with checkpoint.Checkpointer(self.folder(era),
                                   checkpoint.fingerprint(written)) as ckpt:
        ckpt.save(6, self.state, arrays)
      with checkpoint.Checkpointer(
          self.folder(era), checkpoint.fingerprint(now),
          also=outputs.legacy_fingerprints(now)) as ckpt:
        self.assertEqual(ckpt.restore(self.like).step, 6)
      # The finished results of that config are kept too (same_config).
      self.assertTrue(outputs.same_config(written, now))
    # A config that runs a preset with local steps ran otherwise before
    # server_lr (its server stepped by step_size): neither its checkpoint
    # nor its results from then stand for it now (from between, they do).
    fed_now = dict(now, algo='fedavg')
    fed_between = {k: v for k, v in fed_now.items()
                   if k not in slots
                   and k not in ('init', 'client_batch', 'lstm', 'privacy')}
    fed_before = {k: v for k, v in fed_between.items() if k != 'server_lr'}
    self.assertNotIn(checkpoint.fingerprint(fed_before),
                     outputs.legacy_fingerprints(fed_now))
    self.assertIn(checkpoint.fingerprint(fed_between),
                  outputs.legacy_fingerprints(fed_now))
    self.assertFalse(outputs.same_config(fed_before, fed_now))
    grid_now = dict(now, sweep={'algo': ['sgd', 'fedavg']})
    self.assertNotIn(checkpoint.fingerprint(
        {k: v for k, v in grid_now.items()
         if k not in slots
         and k not in ('server_lr', 'init', 'client_batch', 'lstm',
                       'privacy')}),
                     outputs.legacy_fingerprints(grid_now))
    self.assertTrue(outputs.same_config(
        {k: v for k, v in dict(now, sweep={'algo': ['sgd', 'slaq']}).items()
         if k != 'server_lr' and k not in slots},
        dict(now, sweep={'algo': ['sgd', 'slaq']})))
    other = dict(now, server_lr=0.5)
    with checkpoint.Checkpointer(
        self.folder('before'), checkpoint.fingerprint(other),
        also=outputs.legacy_fingerprints(other)) as ckpt:
      with self.assertRaisesRegex(checkpoint.CheckpointError,
                                  'saved by another config'):
        ckpt.restore(self.like)

  def test_keep_must_be_positive(self):
    with self.assertRaisesRegex(ValueError, 'keep=0 is not allowed'):
      checkpoint.Checkpointer(self.folder('keep0'), 'abc', keep=0)


class FingerprintTest(absltest.TestCase):

  def test_fingerprint(self):
    import configs  # pylint: disable=g-import-not-at-top
    a = configs.load('mnist_logreg', 'tiny').to_dict()
    fp = checkpoint.fingerprint(a)
    self.assertRegex(fp, '^[0-9a-f]{64}$')
    self.assertEqual(fp, checkpoint.fingerprint(dict(reversed(list(
        a.items())))))  # key order does not matter
    self.assertEqual(fp, checkpoint.fingerprint(dict(a)))
    changed = dict(a, seed=1)
    self.assertNotEqual(fp, checkpoint.fingerprint(changed))
    self.assertNotEqual(fp, checkpoint.fingerprint(dict(a, bits=3)))
    self.assertNotEqual(fp, checkpoint.fingerprint({**a, 'extra': 0}))


class OrbaxLogTest(absltest.TestCase):

  def test_orbax_errors_are_logged_without_their_traceback(self):
    # A full disk meets orbax in a background thread or an asyncio task,
    # which log the error with a traceback; the launcher reports it in one
    # line, so those tracebacks are dropped (the lines kept). Ours are not.
    import logging  # pylint: disable=g-import-not-at-top
    import types  # pylint: disable=g-import-not-at-top
    code = compile('def boom():\n  raise ValueError("RESOURCE_EXHAUSTED")\n',
                   '/site-packages/orbax/checkpoint/_src/x.py', 'exec')
    fake = types.ModuleType('fake_orbax')
    exec(code, fake.__dict__)  # pylint: disable=exec-used
    for name in ('absl', 'asyncio'):
      logger = logging.getLogger(name)
      try:
        fake.boom()
      except ValueError:
        record = logger.makeRecord(name, logging.ERROR, 'base_events.py', 1,
                                   'Task exception was never retrieved', (),
                                   sys.exc_info())
      self.assertTrue(logger.filter(record))
      self.assertIsNone(record.exc_info, name)
      try:
        raise KeyError('ours')
      except KeyError:
        record = logger.makeRecord(name, logging.ERROR, 'train.py', 1, 'x',
                                   (), sys.exc_info())
      self.assertTrue(logger.filter(record))
      self.assertIsNotNone(record.exc_info, name)


if __name__ == '__main__':
  absltest.main()
