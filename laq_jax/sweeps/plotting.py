"""The paper's figures as matplotlib Figures (returned, never shown or saved).

    curves = [metrics.make_curve('laq', loss_T, final_loss, uploads_T, bits_T,
                                 fstar), ...]
    fig = loss_figure(curves, 'bits')      # residual (log) vs cumulative bits
    fig = upload_raster(sent_TxM)          # who uploaded when

Figures are built with `matplotlib.figure.Figure`, not pyplot: no backend is
chosen, nothing global is kept, so the functions are safe in loops and
scripts. In a notebook, import `matplotlib.pyplot` once (it sets up inline
display) and a returned Figure shows as a cell's value; scripts call
`fig.savefig(path)`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import matplotlib.ticker
import numpy as np
from matplotlib.figure import Figure

from laq_jax.sweeps.metrics import DIVERGENCE_FACTOR, QUANTITIES, Curve
from laq_jax.sweeps.sweep import point_label, varying_keys
from laq_jax.sweeps.sweep_metrics import columns, pareto_front

X_AXES = {
    'iterations': ('iterations', 'iteration k'),
    'uploads': ('uploads', 'cumulative uploads (all workers)'),
    'bits': ('bits', 'cumulative bits uploaded'),
    'bits_total': ('bits_total', 'cumulative bits, uploaded + broadcast'),
    'time': ('time_s', 'simulated seconds (laq_jax.network)'),
}
PAPER_AXES = ('iterations', 'uploads', 'bits')  # the paper's three figures


def y_label(curves: Sequence[Curve]) -> str:
  """The y-axis label of the curves' (common) quantity."""
  return QUANTITIES[curves[0].quantity if curves else 'loss']


def loss_figure(curves: Sequence[Curve], x: str = 'iterations', *,
                title: str | None = None, log_x: bool | None = None,
                figsize: tuple[float, float] = (5.5, 4.0)) -> Figure:
  """Residual (or loss) on a log scale against iterations, uploads or bits.

  Args:
    curves: one per run (see `laq_jax.metrics.make_curve`), all residuals
      or all losses.
    x: 'iterations', 'uploads', 'bits', 'bits_total' or 'time' (simulated
      seconds, for curves that carry `time_s`).
    title: optional axes title.
    log_x: log-scale x axis; default only for bits, whose totals span orders
      of magnitude across algorithms (the point at 0 bits is then left out).
      'bits_total' counts the broadcast too (curves without downlink bits
      count the uplink alone).
    figsize: inches.

  A curve that diverged (`runs_away`: inf, or above 10x its first value) is
  drawn dashed, named "(diverged: clipped)" in the legend, and clipped: the
  y axis spans the other curves' values.

  Returns:
    A Figure with one axes.
  """
  if x not in X_AXES:
    raise ValueError(f'x={x!r} is not allowed: use one of '
                     f'{", ".join(X_AXES)}')
  field, x_label = X_AXES[x]
  if x == 'time' and any(c.time_s is None for c in curves):
    raise ValueError("x='time' needs curves with simulated seconds; these "
                     'have no simulated time (time_s: a network replay, '
                     '`experiments.timeline`, sets it)')
  if len({c.quantity for c in curves}) > 1:
    raise ValueError('curves mix quantities '
                     f'({", ".join(sorted({c.quantity for c in curves}))}): '
                     'build every curve the same way (e.g. with fstar=None to '
                     'compare losses)')
  if log_x is None:  # (a run without a single upload stays linear)
    log_x = x.startswith('bits') and any(np.any(np.asarray(getattr(c, field)) > 0)
                                for c in curves)
  fig = Figure(figsize=figsize, layout='constrained')
  ax = fig.add_subplot()
  away = [runs_away(c.value) for c in curves]
  for curve, ran_away in zip(curves, away):
    y = np.asarray(curve.value, np.float64)
    xs = np.asarray(getattr(curve, field), np.float64)
    # Iterates whose objective was not logged (NaN: `RunSpec.loss_every`)
    # are left out, so the line joins the logged ones.
    keep = ~np.isnan(y)
    y, xs = y[keep], xs[keep]
    # Points a log scale cannot show (residuals at or past f* to rounding;
    # x = 0 on a log x axis) are left out, not clipped to a fake value.
    y = np.where(y > 0, y, np.nan)
    if log_x:
      xs = np.where(xs > 0, xs, np.nan)
    label = curve.label
    if ran_away:  # drawn, clipped to the others' range, and named
      label = (f'{label} (clipped)' if 'diverged' in (label or '') else
               f'{label} (diverged: clipped)' if label else
               'diverged: clipped')
    ax.plot(xs, y, label=label, linewidth=1.4,
            linestyle='--' if ran_away else '-')
  ax.set_yscale('log')
  limits = value_range([c.value for c, a in zip(curves, away) if not a])
  if limits is not None and any(away):
    ax.set_ylim(*limits)
  if log_x:
    ax.set_xscale('log')
  ax.set_xlabel(x_label)
  ax.set_ylabel(y_label(curves))
  ax.grid(True, which='major', alpha=0.3)
  if any(c.label for c in curves):
    ax.legend()
  if title:
    ax.set_title(title)
  return fig


def runs_away(value_K, factor: float = DIVERGENCE_FACTOR) -> bool:
  """Whether a curve diverged as `metrics.diverged_at` reads a loss: a value
  inf, or above `factor` times its first (positive) value. NaN is "not
  logged" (`RunSpec.loss_every`) and never counts."""
  y = np.asarray(value_K, np.float64)
  if np.any(np.isinf(y)):
    return True
  if not y.size or not np.isfinite(y[0]) or y[0] <= 0:
    return False
  with np.errstate(invalid='ignore'):
    return bool(np.any(y > factor * y[0]))


def value_range(values, margin: float = 2.0
                ) -> tuple[float, float] | None:
  """(low, high) of a log axis holding every positive finite value of
  `values` (a list of arrays), `margin` times wider on each side; None
  when there is none."""
  ys = [np.asarray(v, np.float64).ravel() for v in values]
  y = np.concatenate(ys) if ys else np.zeros(0)
  y = y[np.isfinite(y) & (y > 0)]
  if not y.size:
    return None
  return float(y.min()) / margin, float(y.max()) * margin


def loss_figures(curves: Sequence[Curve], *, title: str | None = None,
                 axes: Sequence[str] = PAPER_AXES) -> dict[str, Figure]:
  """One figure per x axis, keyed by it (default: the paper's three,
  'iterations', 'uploads', 'bits')."""
  return {x: loss_figure(curves, x, title=title) for x in axes}


def upload_raster(sent_TxM, *, title: str | None = None,
                  figsize: tuple[float, float] = (7.0, 2.8),
                  event: str = 'uploads') -> Figure:
  """Which worker uploaded at which iteration: a dark cell is an upload.

  Args:
    sent_TxM: bool [T, M] (or any per-step, per-worker event: who took
      part in each round).
    title: optional axes title (the event count is appended).
    figsize: inches.
    event: what a mark is, for the title ('uploads', 'took part').

  Returns:
    A Figure with one axes: iterations across, workers down.
  """
  sent_TxM = np.asarray(sent_TxM, bool)
  if sent_TxM.ndim != 2:
    raise ValueError(f'sent_TxM must be [T, M]; got shape {sent_TxM.shape}')
  num_steps, num_workers = sent_TxM.shape
  fig = Figure(figsize=figsize, layout='constrained')
  ax = fig.add_subplot()
  # One tick per upload (eventplot, not an image: a long run squeezed into
  # a few hundred pixels would drop isolated uploads when resampled).
  ax.eventplot([np.flatnonzero(sent_TxM[:, m]) for m in range(num_workers)],
               lineoffsets=np.arange(num_workers), linelengths=0.8,
               linewidths=0.8, colors='black')
  ax.set_xlim(-0.5, num_steps - 0.5)
  ax.set_ylim(num_workers - 0.5, -0.5)
  ax.set_xlabel('iteration k')
  ax.set_ylabel('worker m')
  if num_workers <= 20:
    ax.set_yticks(range(num_workers))
  label = f'{int(sent_TxM.sum())} {event} of {sent_TxM.size}'
  ax.set_title(f'{title}: {label}' if title else label)
  return fig


# ----------------------------------------------------------------------------
# Sweeps: rows of `laq_jax.sweep_metrics.summarize_sweep`.

def heatmap_quantity(rows: Sequence[Mapping[str, Any]]) -> str:
  """What the heat map shows.

  Returns:
    'target_bits' (every point reached the target residual),
    'target_bits+final_residual' (cells that reached it show their bits,
    the others their final residual, in grey), 'final_residual' (no point
    reached it) or 'final_loss' (f* unknown).
  """
  reached = [r['target_bits'] is not None for r in rows]
  if all(reached):
    return 'target_bits'
  if any(r['final_residual'] is None for r in rows):
    return 'final_loss'
  return 'target_bits+final_residual' if any(reached) else 'final_residual'


def _heat_cells(rows, bits, xis, field):
  """[bits, xi] means over seeds of `field`, and whether every seed reached."""
  value = np.full((len(bits), len(xis)), np.nan)
  residual = np.full((len(bits), len(xis)), np.nan)
  reached = np.zeros((len(bits), len(xis)), bool)
  for i, b in enumerate(bits):
    for j, xi in enumerate(xis):
      cell = [r for r in rows if r['bits'] == b and r['xi'] == xi]
      if not cell:
        continue
      as_float = lambda v: np.nan if v is None else float(v)
      reached[i, j] = all(r['target_bits'] is not None for r in cell)
      if reached[i, j] and field.startswith('target_bits'):
        value[i, j] = np.mean([as_float(r['target_bits']) for r in cell])
      residual[i, j] = np.mean([
          as_float(r['final_loss' if field == 'final_loss' else
                     'final_residual']) for r in cell])
  return value, residual, reached


def heatmap_figure(rows: Sequence[Mapping[str, Any]], *,
                   max_panels: int = 16):
  """Bits to the target residual over bits x xi (final residual if missed).

  Points that differ only in `seed` share a cell (the mean over seeds; a cell
  counts as reached when every seed reached the target). One panel per value
  of the other varying keys (algo, step_size, ...), at most `max_panels`.
  Which quantity is shown: see `heatmap_quantity`; the title says it.

  Args:
    rows: from `summarize`.
    max_panels: raise if more panels would be needed.

  Returns:
    A matplotlib Figure.
  """
  from matplotlib import colors  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  field = heatmap_quantity(rows)
  bits = sorted({r['bits'] for r in rows})
  xis = sorted({r['xi'] for r in rows})
  panel_keys = [k for k in varying_keys(rows)
                if k not in ('bits', 'xi', 'seed')]
  panels: dict[tuple, list] = {}
  for r in rows:
    panels.setdefault(tuple(r[k] for k in panel_keys), []).append(r)
  if len(panels) > max_panels:
    raise ValueError(f'the heat map would need {len(panels)} panels (one per '
                     f'value of {", ".join(panel_keys)}); at most '
                     f'{max_panels}: sweep fewer values of those keys')
  cells = {key: _heat_cells(members, bits, xis, field)
           for key, members in panels.items()}
  coloured = 0 if field.startswith('target_bits') else 1
  finite = np.concatenate([c[coloured][np.isfinite(c[coloured])
                                       & (c[coloured] > 0)]
                           for c in cells.values()])
  norm = (colors.LogNorm(finite.min(), max(finite.max(), finite.min() * 1.001))
          if finite.size else None)
  cols = min(len(panels), 4)
  nrows = math.ceil(len(panels) / cols)
  fig = Figure(figsize=(2.2 + 3.2 * cols, 0.9 + 2.9 * nrows),
               layout='constrained')
  axes = fig.subplots(nrows, cols, squeeze=False)
  image = None
  for ax, (key, (value, residual, reached)) in zip(axes.flat, cells.items()):
    shown = value if coloured == 0 else residual
    shown = np.where(shown > 0, shown, np.nan)
    ax.set_facecolor('0.85')  # cells without a colour: target missed / n/a
    image = ax.imshow(shown, norm=norm, cmap='viridis_r', aspect='auto',
                      origin='lower')
    for i in range(len(bits)):
      for j in range(len(xis)):
        if np.isfinite(shown[i, j]):
          text = f'{shown[i, j]:.2g}'
          red, green, blue, _ = image.cmap(norm(shown[i, j]))
          colour = ('black' if 0.3 * red + 0.6 * green + 0.1 * blue > 0.5
                    else 'white')
        elif np.isfinite(residual[i, j]):  # missed: its final residual
          text, colour = f'res\n{residual[i, j]:.1e}', 'black'
        else:
          text, colour = 'n/a', 'black'
        ax.text(j, i, text, ha='center', va='center', fontsize=7,
                color=colour)
    ax.set_xticks(range(len(xis)), [f'{x:g}' for x in xis])
    ax.set_yticks(range(len(bits)), [str(b) for b in bits])
    ax.set_xlabel(r'$\xi$')
    ax.set_ylabel('bits b')
    if panel_keys:
      ax.set_title(point_label(dict(zip(panel_keys, key)), panel_keys),
                   fontsize=9)
  for ax in list(axes.flat)[len(cells):]:
    ax.set_visible(False)
  labels = {'target_bits': 'bits to the target residual',
            'target_bits+final_residual': 'bits to the target residual',
            'final_residual': r'final residual $f(\theta^T) - f^*$',
            'final_loss': r'final loss $f(\theta^T)$'}
  if image is not None and norm is not None:
    fig.colorbar(image, ax=axes, label=labels[field], shrink=0.9)
  target = rows[0]['target_residual']
  missed = sum(r['target_bits'] is None for r in rows)
  titles = {
      'target_bits': f'bits to reach residual <= {target:g}',
      'target_bits+final_residual': (
          f'bits to reach residual <= {target:g}\ngrey: {missed} of '
          f'{len(rows)} points never reached it, final residual shown'),
      'final_residual': (f'target residual {target:g} never reached:\nfinal '
                         'residual shown instead of bits to target'),
      'final_loss': 'f* unknown: final loss shown instead of bits to target',
  }
  title = titles[field]
  seeds = len({r['seed'] for r in rows})
  if seeds > 1:
    title += f' (mean over {seeds} seeds)'
  fig.suptitle(title, fontsize=10)
  return fig


def pareto_figure(rows: Sequence[Mapping[str, Any]]):
  """Test accuracy (and final residual) against total bits, front marked.

  One panel per quality measure available: test accuracy (higher is better)
  and the final residual (lower is better; only with f*). Points are
  coloured by algorithm when the grid varies it, else by bits.

  Returns:
    A matplotlib Figure.
  """
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  cols = columns(rows)
  measures = []
  if np.isfinite(cols['final_test_accuracy']).any():
    measures.append(('final_test_accuracy', 'test accuracy', True, False))
  if np.isfinite(cols['final_residual']).any():
    measures.append(('final_residual', r'final residual $f(\theta^T) - f^*$',
                     False, True))
  if not measures:
    measures.append(('final_loss', r'final loss $f(\theta^T)$', False, True))
  varying = varying_keys(rows)
  colour_key = 'algo' if 'algo' in varying else 'bits'
  groups = list(dict.fromkeys(r[colour_key] for r in rows))
  fig = Figure(figsize=(5.2 * len(measures), 4.2), layout='constrained')
  axes = fig.subplots(1, len(measures), squeeze=False)[0]
  total_bits = cols['total_bits'].astype(np.float64)
  silent = int(np.sum(total_bits <= 0))
  # A log axis cannot show a point that uploaded nothing.
  total_bits = np.where(total_bits > 0, total_bits, np.nan)
  for ax, (field, label, maximize, log_y) in zip(axes, measures):
    y = cols[field]
    for value in groups:
      mask = np.asarray([r[colour_key] == value for r in rows])
      ax.scatter(total_bits[mask], y[mask], s=18, alpha=0.75,
                 label=f'{colour_key}={value}')
    front = pareto_front(total_bits, y, maximize=maximize)
    if front.size:
      ax.step(total_bits[front], y[front], where='post', color='black',
              linewidth=1.0, label='Pareto front')
      ax.scatter(total_bits[front], y[front], s=46, facecolors='none',
                 edgecolors='black')
      labelled = set()
      for i in front:
        if (total_bits[i], y[i]) in labelled or len(labelled) >= 12:
          continue  # identical points (e.g. seeds of a full-batch run)
        labelled.add((total_bits[i], y[i]))
        ax.annotate(point_label(rows[i], varying), (total_bits[i], y[i]),
                    fontsize=6, xytext=(3, 3), textcoords='offset points')
    if np.isfinite(total_bits).any():  # (not when nothing was uploaded)
      ax.set_xscale('log')
      ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    if log_y and np.any(np.isfinite(y) & (y > 0)):
      ax.set_yscale('log')
    ax.set_xlabel('total bits uploaded')
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  note = (f'; {silent} point(s) uploaded nothing and are not shown'
          if silent else '')
  fig.suptitle(f'Pareto front: quality against total bits ({len(rows)} '
               f'points{note})', fontsize=10)
  return fig


# `tradeoff_figure`'s marks: a colour and a marker per run, distinct for up
# to 10 x 6 runs (every run named in one legend beside the axes, none by a
# label on the plot, where crowded points made them unreadable).
_MARKERS = ('o', 's', '^', 'D', 'v', 'P')


def _major_labels_only(ax, log_y: bool) -> None:
  """No labels on a log axis's minor ticks where a power of ten is in view
  (matplotlib labels some of them on axes just over a decade wide, where
  they overlap)."""
  for axis, lim, log in ((ax.xaxis, ax.get_xlim(), True),
                         (ax.yaxis, ax.get_ylim(), log_y)):
    lo, hi = sorted(lim)
    if log and lo > 0 and math.floor(math.log10(hi)) >= math.log10(lo):
      axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def tradeoff_figure(labels: Sequence[str], cost, value, *, x_label: str,
                    y_label: str, title: str | None = None,
                    log_y: bool = True,
                    figsize: tuple[float, float] = (8.5, 4.6)) -> Figure:
  """One point per run: value (lower is better) against cost, log-log, the
  Pareto front (`sweep_metrics.pareto_front`: no other run costs less and
  does no worse) drawn and its points ringed; each run has its own colour
  and marker, named in one legend beside the axes ('(front)' after the
  names on the front).

  Args:
    labels: one per run.
    cost: e.g. total bits; value: e.g. final residual or loss.
    x_label, y_label, title: the axes' words.
    log_y: log scale for the value (for residuals).
    figsize: inches.
  """
  cost = np.asarray(cost, np.float64)
  value = np.asarray(value, np.float64)
  front = pareto_front(cost, value, maximize=False)
  fig = Figure(figsize=figsize, layout='constrained')
  ax = fig.add_subplot()
  shown = np.isfinite(cost) & np.isfinite(value) & (cost > 0)
  if log_y:
    shown &= value > 0
  on_front = [i for i in front if shown[i]]
  if on_front:
    ax.step(cost[on_front], value[on_front], where='post', color='black',
            linewidth=1.0, label='Pareto front', zorder=1)
    ax.scatter(cost[on_front], value[on_front], s=90, facecolors='none',
               edgecolors='black', zorder=3)
  colours = [f'C{i}' for i in range(10)]
  for n, i in enumerate(np.flatnonzero(shown)):
    ax.scatter(cost[i], value[i], s=30, color=colours[n % 10],
               marker=_MARKERS[(n // 10) % len(_MARKERS)], zorder=2,
               label=labels[i] + (' (front)' if i in on_front else ''))
  ax.set_xscale('log')
  if log_y:
    ax.set_yscale('log')
  ax.set_xlabel(x_label)
  ax.set_ylabel(y_label)
  ax.grid(True, which='major', alpha=0.3)
  _major_labels_only(ax, log_y)
  if shown.any():
    fig.legend(*ax.get_legend_handles_labels(), loc='outside right upper',
               fontsize=7, ncols=1 if shown.sum() <= 16 else 2,
               frameon=False)
  if title:
    ax.set_title(title, fontsize=10)
  return fig
