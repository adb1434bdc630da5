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

from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from laq_jax.metrics import QUANTITIES, Curve

X_AXES = {
    'iterations': ('iterations', 'iteration k'),
    'uploads': ('uploads', 'cumulative uploads (all workers)'),
    'bits': ('bits', 'cumulative bits uploaded'),
}


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
    x: 'iterations', 'uploads' or 'bits'.
    title: optional axes title.
    log_x: log-scale x axis; default only for bits, whose totals span orders
      of magnitude across algorithms (the point at 0 bits is then left out).
    figsize: inches.

  Returns:
    A Figure with one axes.
  """
  if x not in X_AXES:
    raise ValueError(f'x={x!r} is not allowed: use one of '
                     f'{", ".join(X_AXES)}')
  field, x_label = X_AXES[x]
  if len({c.quantity for c in curves}) > 1:
    raise ValueError('curves mix quantities '
                     f'({", ".join(sorted({c.quantity for c in curves}))}): '
                     'build every curve the same way (e.g. with fstar=None to '
                     'compare losses)')
  if log_x is None:  # (a run without a single upload stays linear)
    log_x = x == 'bits' and any(np.any(np.asarray(getattr(c, field)) > 0)
                                for c in curves)
  fig = Figure(figsize=figsize, layout='constrained')
  ax = fig.add_subplot()
  for curve in curves:
    y = np.asarray(curve.value, np.float64)
    xs = np.asarray(getattr(curve, field), np.float64)
    # Points a log scale cannot show (residuals at or past f* to rounding;
    # x = 0 on a log x axis) are left out, not clipped to a fake value.
    y = np.where(y > 0, y, np.nan)
    if log_x:
      xs = np.where(xs > 0, xs, np.nan)
    ax.plot(xs, y, label=curve.label, linewidth=1.4)
  ax.set_yscale('log')
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


def loss_figures(curves: Sequence[Curve], *, title: str | None = None
                 ) -> dict[str, Figure]:
  """The three figures of the paper, keyed 'iterations', 'uploads', 'bits'."""
  return {x: loss_figure(curves, x, title=title) for x in X_AXES}


def upload_raster(sent_TxM, *, title: str | None = None,
                  figsize: tuple[float, float] = (7.0, 2.8)) -> Figure:
  """Which worker uploaded at which iteration: a dark cell is an upload.

  Args:
    sent_TxM: bool [T, M].
    title: optional axes title (the upload count is appended).
    figsize: inches.

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
  label = f'{int(sent_TxM.sum())} uploads of {sent_TxM.size}'
  ax.set_title(f'{title}: {label}' if title else label)
  return fig
