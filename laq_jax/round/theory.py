"""The step sizes the papers' theorems allow, from the problem's smoothness.

    L_minus, L_plus = theory.smoothness(x_MxNxD, l2)      # logistic regression
    L_minus, L_plus = theory.smoothness(x_MxNxD, l2, model='binary_nonconvex')
    alpha = theory.step_size('tpc_ef21', L_minus, L_plus, M, P)

L_minus is the smoothness constant of the mean objective (1/M) sum_m f_m,
L_plus = sqrt((1/M) sum_m L_m^2) of the workers' own. The papers step gamma
on the MEAN of the workers' vectors, the suite alpha on their SUM: alpha =
gamma / M (docs/algorithm.md, "After LAQ"). The authors run 2^j times the
theory's step and keep the best (a grid axis over `step_size`).

The 3PC family (Richtarik et al. 2022, Theorem 1): gamma = 1 / (L_minus +
L_plus sqrt(B / A)) with (A, B) of each preset's three-point compressor
(the 3PC poster's Table 1, `CONSTANTS`); MARINA (the 3PC scripts' form of
Gorbunov et al. 2021, Theorem 2.1): 1 / (L_minus + L_plus sqrt((1 - p) omega
/ (p M))); DASHA (Tyurin and Richtarik 2023, Theorem 6.1 as read by the
contract): 1 / (L_minus + sqrt(16 omega (2 omega + 1) / M) L_plus). Other
presets have no encoded theory step: refused. Scaffnew's gamma and p
(`scaffnew_settings`) are its client's parameters.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from laq_jax.parts import sparsify
from laq_jax.round import hyper as hyper_lib
from laq_jax.show import show


def power_max_eigenvalue(a_DxD: np.ndarray, tol: float = 1e-10,
                         max_iter: int = 100_000) -> float:
  """The largest eigenvalue of a symmetric positive semidefinite matrix, by
  power iteration in float64 until the estimate changes by less than `tol`
  relatively."""
  a = np.asarray(a_DxD, np.float64)
  v = np.ones(a.shape[0]) / math.sqrt(a.shape[0])
  estimate = 0.0
  for _ in range(max_iter):
    w = a @ v
    norm = float(np.linalg.norm(w))
    if norm == 0.0:
      return 0.0
    v = w / norm
    new = float(v @ (a @ v))
    if abs(new - estimate) <= tol * abs(new):
      return new
    estimate = new
  return estimate


def _gram_bound(x_NxD: np.ndarray, curvature: float = 0.5) -> float:
  """curvature lambda_max(X~^T X~) / n, X~ = [X, 1]: the mean Hessian
  bound of a loss whose second derivative in the score is at most
  `curvature` (softmax cross-entropy 1/2, the binary logistic loss 1/4)."""
  x = np.asarray(x_NxD, np.float64).reshape(len(x_NxD), -1)
  x = np.concatenate([x, np.ones((len(x), 1))], axis=1)
  return curvature * power_max_eigenvalue(x.T @ x) / len(x)


# The models with a smoothness bound here: (the loss's curvature bound in
# its score, the regularizer's curvature bound in units of l2).
SMOOTH_MODELS = {'logreg': (0.5, 1.0), 'binary': (0.25, 1.0),
                 'binary_nonconvex': (0.25, 2.0)}


def smoothness(x_MxNxD, l2: float, counts_M=None, model: str = 'logreg'
               ) -> tuple[float, float]:
  """(L_minus, L_plus) of `model` (SMOOTH_MODELS): each f_m the mean loss
  of its rows plus its regularizer. L_m = c lambda_max(X~_m^T X~_m) / n_m
  + r l2 with (c, r) = (1/2, 1) for logistic regression (softmax Hessian
  <= 1/2), (1/4, 1) for `binary` (the logistic loss's <= 1/4) and (1/4, 2)
  for `binary_nonconvex` (lam sum theta_j^2 / (1 + theta_j^2) has
  curvature <= 2 lam; the 3PC code's oracle.py); L_minus the same bound on
  every row (the mean of f_m over equal workers), L_plus = sqrt(mean
  L_m^2). `counts_M`: each worker's own rows (the first n_m of its
  shard)."""
  if model not in SMOOTH_MODELS:
    raise ValueError(f'model {model!r} has no smoothness bound here: the '
                     f'models with one are {", ".join(SMOOTH_MODELS)}')
  curvature, reg = SMOOTH_MODELS[model]
  x = np.asarray(x_MxNxD, np.float64)
  counts = ([x.shape[1]] * x.shape[0] if counts_M is None
            else [int(n) for n in np.asarray(counts_M)])
  rows = [x[m, :n] for m, n in enumerate(counts)]
  if len(set(counts)) > 1:
    raise ValueError(f'counts_M={show(counts)}: workers of unequal sizes; '
                     'L_minus is stated here for equal shards (the mean of '
                     'f_m is then the mean loss over every row)')
  l_m = np.array([_gram_bound(r, curvature) for r in rows]) + reg * l2
  l_minus = _gram_bound(np.concatenate(rows), curvature) + reg * l2
  return float(l_minus), float(np.sqrt(np.mean(l_m ** 2)))


def scaffnew_settings(x_MxNxD, l2: float) -> dict[str, float]:
  """Scaffnew's theory settings for logistic regression (Mishchenko et al.
  2022, Theorem 3.6's choice; after-laq.md section 5 (c)): gamma =
  1 / L_max and p = 1 / sqrt(kappa), kappa = L_max / mu, with L_max the
  largest worker's smoothness (`smoothness`'s L_m bound) and mu = l2 (each
  f_m is l2-strongly convex). Returns {'scaffnew.lr': gamma, 'scaffnew.p':
  p}, parameters `make_hyper` takes."""
  if not l2 > 0:
    raise ValueError(f'l2={show(l2)} is not allowed: Scaffnew\'s p = '
                     '1 / sqrt(L_max / mu) needs mu = l2 > 0')
  x = np.asarray(x_MxNxD, np.float64)
  l_max = max(_gram_bound(x[m]) for m in range(x.shape[0])) + l2
  return {'scaffnew.lr': 1.0 / l_max,
          'scaffnew.p': min(1.0, 1.0 / math.sqrt(l_max / l2))}


def _k_fraction(value, num_params: int) -> float:
  """k / P for a top-k or Rand-K parameter k (a fraction of P below 1): the
  count a run keeps (`sparsify.top_k_count` on the Hyper's own value)."""
  return int(sparsify.top_k_count(value, num_params)) / num_params


def _ef21(alpha: float) -> tuple[float, float]:
  root = math.sqrt(1 - alpha)
  if root == 1.0:  # alpha = 0 would never move: not a compressor
    raise ValueError('top-k keeps nothing: alpha = k / P must be > 0')
  return 1 - root, (1 - alpha) / (1 - root)


def _values(algo: str, num_params: int, params: dict) -> dict:
  """The preset's parameters that its theory reads, as floats."""
  h = hyper_lib.make_hyper(algo, **params)
  get = lambda part, name: float(np.asarray(h.params[part][name]))
  k_of = lambda part: _k_fraction(h.params[part]['k'], num_params)
  randk_k, alpha = k_of('randk'), k_of('top_k')
  slot = randk_k if hyper_lib.get_algorithm(algo).compressor == 'randk' else (
      alpha)
  p = get('marina', 'p')
  return {
      'alpha': alpha,
      'alpha_2': k_of('top_k_b'),
      'omega_b': 1 / k_of('randk_b') - 1,
      'omega': 1 / randk_k - 1,
      'zeta': get('tpc_lazy', 'zeta'),
      'zeta_v3': get('tpc_v3', 'zeta'),
      'p': p if p > 0 else slot,
  }


def _v4(v: dict) -> tuple[float, float]:
  return _ef21(1 - (1 - v['alpha']) * (1 - v['alpha_2']))


def _v5(v: dict) -> tuple[float, float]:
  root = math.sqrt(1 - v['p'])
  if root == 1.0:
    raise ValueError('p = 0: the full-gradient round never comes')
  return 1 - root, (1 - v['p']) * (1 - v['alpha']) / (1 - root)


# The 3PC poster's Table 1: (A, B) of each preset's three-point compressor
# (alpha = k / P of top-k, omega = P / k - 1 of Rand-K, zeta the LAG test's).
CONSTANTS: dict[str, Callable[[dict], tuple[float, float]]] = {
    'tpc_ef21': lambda v: _ef21(v['alpha']),
    'tpc_lag': lambda v: (1.0, v['zeta']),
    'tpc_clag': lambda v: (_ef21(v['alpha'])[0],
                           max(_ef21(v['alpha'])[1], v['zeta'])),
    'tpc_v1': lambda v: (1.0, 1 - v['alpha']),
    'tpc_v2': lambda v: (v['alpha'], (1 - v['alpha']) * v['omega_b']),
    'tpc_v3': lambda v: (1.0, (1 - v['alpha']) * v['zeta_v3']),
    'tpc_v4': _v4,
    'tpc_v5': _v5,
}
PRESETS = (*CONSTANTS, 'marina', 'dasha')


def gamma(algo: str, l_minus: float, l_plus: float, num_workers: int,
          num_params: int, **params) -> float:
  """The theory's gamma, a step on the MEAN of the workers' vectors, for
  preset `algo` at its parameters (dotted overrides: `**{'top_k.k': 5}`).

  Raises:
    ValueError: a preset without an encoded theory step (named, with those
      that have one), or constants that never move.
  """
  if algo not in PRESETS:
    raise ValueError(f'algo={show(algo)} has no encoded theory step: give '
                     'step_size yourself (the authors tune 2^j / L); the '
                     f'presets with one: {", ".join(PRESETS)}')
  if not (l_minus > 0 and l_plus > 0):
    raise ValueError(f'L_minus={show(l_minus)}, L_plus={show(l_plus)}: '
                     'smoothness constants must be > 0')
  v = _values(algo, num_params, params)
  if algo in CONSTANTS:
    a, b = CONSTANTS[algo](v)
    return 1 / (l_minus + l_plus * math.sqrt(b / a))
  omega = v['omega']
  if algo == 'marina':
    return 1 / (l_minus + l_plus * math.sqrt(
        (1 - v['p']) * omega / (v['p'] * num_workers)))
  return 1 / (l_minus + math.sqrt(16 * omega * (2 * omega + 1)
                                  / num_workers) * l_plus)


def step_size(algo: str, l_minus: float, l_plus: float, num_workers: int,
              num_params: int, **params) -> float:
  """alpha = gamma / M: the theory's step as the suite's `step_size` (a step
  on the SUM of the workers' vectors); see `gamma`."""
  return gamma(algo, l_minus, l_plus, num_workers, num_params,
               **params) / num_workers
