"""laq_jax.show: values on one line and the names nearest a typo, against
hand-worked examples (the messages every refusal of the library ends in)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import show as show_lib

FIELDS = ('step_size', 'bits', 'xi', 'err_weight', 'threshold_offset',
          'max_staleness', 'l2', 'seed', 'network_up_bps',
          'network_down_bps', 'ef21_top_k')


class ShowTest(absltest.TestCase):

  def test_one_line(self):
    self.assertEqual(show_lib.show('abc'), "'abc'")
    self.assertEqual(show_lib.show(np.array([[1, 2], [3, 4]])),
                     'array([[1, 2], [3, 4]])')
    # A repr spread over lines (an array's rows) comes back on one, its runs
    # of spaces single.
    rows = np.arange(24).reshape(2, 12)
    self.assertIn('\n', repr(rows))
    self.assertEqual(show_lib.show(rows, limit=1000),
                     'array([[ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], '
                     '[12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]])')

  def test_cut_at_the_limit(self):
    text = show_lib.show('x' * 200)
    self.assertLen(text, show_lib.LIMIT)
    self.assertEqual(text, "'" + 'x' * 76 + '...')
    self.assertEqual(show_lib.show('x' * 10, limit=8), "'xxxx...")
    # Exactly at the limit: whole.
    self.assertEqual(show_lib.show('x' * 6, limit=8), "'xxxxxx'")


  def test_look_alike_letters_are_named(self):
    # A Cyrillic 'а' prints like the Latin 'a': the message names it.
    cyrillic = 'l\u0430q'
    self.assertEqual(show_lib.show(cyrillic),
                     "'l\u0430q' (not ASCII: '\u0430' U+0430 CYRILLIC SMALL "
                     'LETTER A)')
    self.assertEqual(show_lib.show('laq'), "'laq'")
    many = '\u0430\u0435\u043e\u0440\u0430'  # four distinct, one twice
    self.assertRegex(show_lib.lookalikes(many),
                     r"^ \(not ASCII: '.' U\+0430 .*, '.' U\+0435 .*, '.' "
                     r'U\+043E .* and 1 more\)$')
    with self.assertRaisesRegex(ValueError, r"unknown algorithm 'l.q' \(not "
                                'ASCII: .* U\\+0430 CYRILLIC SMALL LETTER A'):
      import laq_jax  # pylint: disable=g-import-not-at-top
      laq_jax.make_hyper(cyrillic)


class ClosestTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('one_letter_off', 'bitz', ['bits']),
      ('swapped_letters', 'step_szie', ['step_size']),
      ('case_ignored', 'BITS', ['bits']),
      # Too far for difflib, but a prefix of two names: both, in order.
      ('prefix', 'network', ['network_up_bps', 'network_down_bps']),
      # A word of a name ('_'-separated).
      ('word', 'top', ['ef21_top_k']),
      ('nothing_near', 'qqqq', []),
  )
  def test_hand_worked(self, name, want):
    self.assertEqual(show_lib.closest(name, FIELDS), want)

  def test_short_names_are_no_prefix(self):
    # Under three letters a prefix says little: 'ne' suggests nothing.
    self.assertEqual(show_lib.closest('ne', FIELDS), [])
    self.assertEqual(show_lib.closest('net', FIELDS),
                     ['network_up_bps', 'network_down_bps'])

  def test_at_most_n_closest_first(self):
    choices = ['seed1', 'seed2', 'seed3', 'seed4', 'seeds']
    got = show_lib.closest('seed', choices)
    self.assertLen(got, 3)
    self.assertLen(show_lib.closest('seed', choices, n=5), 5)
    # The closest by difflib's ratio first: 2*8/17 = 0.94 for 'step_size',
    # 2*8/18 = 0.89 for 'step_sizes'.
    self.assertEqual(show_lib.closest('stepsize', ['step_sizes', 'step_size']),
                     ['step_size', 'step_sizes'])

  def test_names_that_are_not_text(self):
    self.assertEqual(show_lib.closest(4, ['4', 'x']), ['4'])


class UnknownTest(absltest.TestCase):

  def test_did_you_mean(self):
    self.assertEqual(show_lib.unknown('bitz', FIELDS),
                     "no field 'bitz'; did you mean 'bits'?")
    # difflib's ratios: 2*5/11 = 0.91 for 'seeds2', 2*4/9 = 0.89 for 'seed'.
    self.assertEqual(show_lib.unknown('seeds', ['seed', 'seeds2'], 'key'),
                     "no key 'seeds'; did you mean 'seeds2' or 'seed'?")

  def test_the_sorted_list_when_nothing_is_near(self):
    self.assertEqual(show_lib.unknown('qqqq', ['xi', 'bits', 'l2'],
                                      'hyperparameter'),
                     "no hyperparameter 'qqqq'; hyperparameters: bits, l2, xi")

  def test_a_long_name_is_cut(self):
    message = show_lib.unknown('z' * 500, ['a'])
    self.assertLess(len(message), 120)
    self.assertIn('...', message)


if __name__ == '__main__':
  absltest.main()
