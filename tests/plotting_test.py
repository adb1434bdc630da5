"""laq_jax.plotting: the paper's figures and the sweep figures."""

from absl.testing import absltest
import numpy as np

from laq_jax import metrics
from laq_jax import plotting
from laq_jax import sweep
from laq_jax.hyper import DEFAULTS


class PlottingTest(absltest.TestCase):

  def curves(self, fstar):
    return [metrics.make_curve(name, [10.0, 6.0, 4.0], 3.5, [2, 0, 1],
                               [20, 0, 10], fstar=fstar)
            for name in ('gd', 'laq')]

  def test_loss_figures(self):
    figures = plotting.loss_figures(self.curves(3.0))
    self.assertEqual(set(figures), {'iterations', 'uploads', 'bits'})
    for x, fig in figures.items():
      ax = fig.axes[0]
      self.assertEqual(ax.get_yscale(), 'log')
      self.assertLen(ax.get_lines(), 2)
      self.assertIn('residual', ax.get_ylabel())
      np.testing.assert_array_equal(
          ax.get_lines()[0].get_xdata(),
          {'iterations': [0, 1, 2, 3], 'uploads': [0, 2, 2, 3],
           'bits': [np.nan, 20, 20, 30]}[x])  # log x: no 0
      self.assertEqual(ax.get_xscale(), 'log' if x == 'bits' else 'linear')

  def test_a_diverged_curve_is_clipped_and_named(self):
    # SLAQ running away to a loss of 1e7 must not stretch the axis: the y
    # range stays within the converged curves' values, the runaway is
    # drawn, dashed, and named in the legend.
    good = self.curves(3.0)
    bad = metrics.make_curve('slaq', [10.0, 1e3, 1e7], 1e7, [2, 2, 2],
                             [20, 20, 20], fstar=3.0)
    for x in ('iterations', 'bits'):
      ax = plotting.loss_figure(good + [bad], x).axes[0]
      low, high = ax.get_ylim()
      converged = np.concatenate([c.value for c in good])
      self.assertLessEqual(high, 2 * converged.max() * (1 + 1e-9))
      self.assertGreaterEqual(low, converged.min() / 2 * (1 - 1e-9))
      labels = [t.get_text() for t in ax.get_legend().get_texts()]
      self.assertEqual(labels, ['gd', 'laq', 'slaq (diverged: clipped)'])
      self.assertEqual(ax.get_lines()[2].get_linestyle(), '--')
    # without a runaway, matplotlib's own limits (nothing clipped)
    ax = plotting.loss_figure(good + [good[0]._replace(label='x')]).axes[0]
    self.assertNotIn('clipped', str(ax.get_legend().get_texts()))
    self.assertTrue(plotting.runs_away([1.0, np.nan, np.inf]))
    self.assertFalse(plotting.runs_away([1.0, np.nan, 9.0]))

  def test_tradeoff_names_every_run_once_in_a_legend(self):
    # Crowded runs (three at one place, as FedAvg and local SGD are) each
    # get their own mark and one legend entry, the front's marked; no text
    # on the plot; no minor tick labels on an axis with a power of ten in
    # view (matplotlib printed overlapping ones on a 1.2-decade axis).
    names = ['gd', 'laq', 'fedavg', 'local_sgd', 'fedpaq', 'lag', 'x']
    cost = [2e10, 1.3e9, 7.5e9, 7.5e9, 7.6e9, 1.0e10, np.nan]
    value = [5e-10, 1.6e-8, 5e-4, 5e-4, 5.1e-4, 1.2e-10, 1.0]
    fig = plotting.tradeoff_figure(names, cost, value, x_label='bits',
                                   y_label='f - f*')
    ax = fig.axes[0]
    named = [t.get_text() for t in fig.legends[0].get_texts()]
    # Independent: the front by hand (cost up, value strictly down).
    self.assertEqual(named, ['Pareto front', 'gd', 'laq (front)', 'fedavg',
                             'local_sgd', 'fedpaq', 'lag (front)'])
    self.assertEmpty(ax.texts)
    marks = {(tuple(c.get_facecolor()[0]), c.get_paths()[0].vertices.tobytes())
             for c in ax.collections[1:]}  # [0]: the front's rings
    self.assertLen(marks, 6)  # every drawn run its own colour and marker
    fig.canvas.draw()
    self.assertEqual([t.get_text() for t in ax.get_xticklabels(minor=True)
                      if t.get_text()], [])

  def test_loss_label_without_fstar(self):
    fig = plotting.loss_figure(self.curves(None), 'bits')
    self.assertIn('f* unknown', fig.axes[0].get_ylabel())

  def test_mixed_curves_and_bad_axis_raise(self):
    with self.assertRaisesRegex(ValueError, 'mix'):
      plotting.loss_figure(self.curves(3.0)[:1] + self.curves(None)[:1])
    with self.assertRaisesRegex(ValueError, "x='seconds'"):
      plotting.loss_figure(self.curves(3.0), 'seconds')
    # Simulated seconds only for curves that carry them (a network replay).
    with self.assertRaisesRegex(ValueError, "x='time'.*no simulated time"):
      plotting.loss_figure(self.curves(3.0), 'time')
    timed = [c._replace(time_s=np.arange(len(c.value)) * 0.5)
             for c in self.curves(3.0)]
    fig = plotting.loss_figure(timed, 'time')
    self.assertIn('simulated seconds', fig.axes[0].get_xlabel())

  def test_upload_raster(self):
    sent = np.zeros((50, 4), bool)
    sent[[0, 7, 49], [0, 3, 2]] = True
    fig = plotting.upload_raster(sent, title='laq')
    ax = fig.axes[0]
    self.assertIn('3 uploads of 200', ax.get_title())
    events = [c.get_positions() for c in ax.collections]
    np.testing.assert_array_equal(events[0], [0])
    np.testing.assert_array_equal(events[2], [49])
    np.testing.assert_array_equal(events[3], [7])
    self.assertEmpty(events[1])

  def test_grad_norm_curves_are_labelled(self):
    curve = metrics.value_curve('laq', [4.0, 2.0, 1.0], [2, 0, 1],
                                [20, 0, 10], 'grad_norm_sq')
    np.testing.assert_array_equal(curve.uploads, [0, 2, 2])
    fig = plotting.loss_figure([curve], 'uploads')
    self.assertIn('gradient norm', fig.axes[0].get_ylabel())
    with self.assertRaisesRegex(ValueError, "quantity='norm'"):
      metrics.value_curve('laq', [1.0], [1], [1], 'norm')

  def test_heatmap_quantity(self):
    row = lambda bits, res: {'target_bits': bits, 'final_residual': res}
    self.assertEqual(plotting.heatmap_quantity([row(5, 1e-7), row(9, 1e-8)]),
                     'target_bits')
    self.assertEqual(
        plotting.heatmap_quantity([row(5, 1e-7), row(None, 0.1)]),
        'target_bits+final_residual')
    self.assertEqual(plotting.heatmap_quantity([row(None, 1.0)]),
                     'final_residual')
    self.assertEqual(plotting.heatmap_quantity([row(None, None)]),
                     'final_loss')

  def test_sweep_figures(self):
    base = dict(sweep.expand_grid({}, {'algo': 'laq', **DEFAULTS})[0])
    rows = [dict(base, algo=a, bits=b, xi=x,
                 target_bits=None if b == 2 else 1000 * b,
                 target_residual=1e-6, final_residual=1e-3 / b,
                 final_loss=1.0, total_bits=10**6 * b,
                 final_test_accuracy=0.8 + 0.01 * b)
            for a in ('lag', 'laq') for b in (2, 4) for x in (0.4, 0.8)]
    fig = plotting.heatmap_figure(rows)
    self.assertLen([ax for ax in fig.axes if ax.get_visible()
                    and ax.get_label() != '<colorbar>'], 2)  # one per algo
    self.assertIn('never reached', fig.get_suptitle())
    fig = plotting.pareto_figure(rows)
    self.assertLen(fig.axes, 2)  # accuracy and residual panels
    with self.assertRaisesRegex(ValueError, 'panels'):
      plotting.heatmap_figure(rows, max_panels=1)


if __name__ == '__main__':
  absltest.main()
