"""A straightforward NumPy implementation of the LAQ family, written from the spec.

Sun, Chen, Giannakis, Yang, "Communication-Efficient Distributed Learning via
Lazily Aggregated Quantized Gradients", NeurIPS 2019 (arXiv 1909.07588); the
contract is shared/laq-spec.md ("One iteration k").

It shares no code with laq_jax: the benchmark times it against laq-jax and uses
it as an independent check (same uploads, same losses). Workers are a Python
loop, gradients are hand-written (softmax cross-entropy for multinomial
logistic regression and a one-hidden-layer ReLU MLP), and every array is in
the dtype of the data (float32 or float64).

Flat parameter layout (what `jax.flatten_util.ravel_pytree` gives for the
laq_jax models, whose dict keys flatten in sorted order):
  logreg: [b (C), w (D x C, row-major)]
  mlp:    [hidden.bias (H), hidden.kernel (D x H), out.bias (C),
           out.kernel (H x C)]
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Hyper:
  """The numbers of one run (see the spec's defaults)."""
  step_size: float = 0.02
  bits: int = 4
  xi: float = 0.8
  err_weight: float = 3.0
  threshold_offset: float = 0.0
  max_staleness: int = 100
  l2: float = 0.01
  quantize: bool = True
  lazy: bool = True


PRESETS = {  # (quantize, lazy) of the full-gradient algorithms
    'gd': (False, False),
    'qgd': (True, False),
    'lag': (False, True),
    'laq': (True, True),
}


def hyper_for(algo: str, **overrides) -> Hyper:
  """The Hyper of a preset ('gd', 'qgd', 'lag', 'laq') with overrides."""
  quantize, lazy = PRESETS[algo]
  return Hyper(quantize=quantize, lazy=lazy, **overrides)


@dataclasses.dataclass
class State:
  """Server and worker memory (spec, "State")."""
  theta_P: np.ndarray
  last_upload_MxP: np.ndarray
  last_error_M: np.ndarray
  clock_M: np.ndarray
  aggregate_P: np.ndarray
  history_D: np.ndarray


# A worker that has never uploaded is infinitely stale, so every worker
# uploads at k = 0: the paper's Algorithm 1 starts the server from every
# worker's initial upload (laq_jax reads the spec's "t_m = 0 at start" this
# way too; taken literally, a worker whose c_e * e exceeds ||Q||^2 would skip
# at k = 0, which silences the MLP for tbar steps).
NEVER_UPLOADED = np.iinfo(np.int64).max


def init(theta_P: np.ndarray, num_workers: int, memory: int = 10) -> State:
  """Iteration 0: the given parameters, zero memory, no worker uploaded yet."""
  theta_P = np.array(theta_P)
  dtype = theta_P.dtype
  return State(
      theta_P=theta_P,
      last_upload_MxP=np.zeros((num_workers, theta_P.size), dtype),
      last_error_M=np.zeros(num_workers, dtype),
      clock_M=np.full(num_workers, NEVER_UPLOADED, np.int64),
      aggregate_P=np.zeros(theta_P.size, dtype),
      history_D=np.zeros(memory, dtype),
  )


# ---------------------------------------------------------------------------
# Models: f_m(theta) = mean softmax cross-entropy + (lam / 2) ||theta||^2.


def _softmax_xent(logits_NxC: np.ndarray, y_N: np.ndarray):
  """(mean loss, d mean loss / d logits)."""
  n = logits_NxC.shape[0]
  shifted = logits_NxC - logits_NxC.max(axis=1, keepdims=True)
  exp = np.exp(shifted)
  total = exp.sum(axis=1, keepdims=True)
  log_z = np.log(total)[:, 0]
  loss = np.mean(log_z - shifted[np.arange(n), y_N])
  dlogits = exp / total
  dlogits[np.arange(n), y_N] -= 1
  dlogits /= n
  return loss, dlogits


def logreg_loss_grad(theta_P: np.ndarray, x_NxD: np.ndarray, y_N: np.ndarray,
                     l2: float, num_classes: int = 10):
  """(f_m, grad f_m) of multinomial logistic regression."""
  dim = x_NxD.shape[1]
  b = theta_P[:num_classes]
  w = theta_P[num_classes:].reshape(dim, num_classes)
  loss, dlogits = _softmax_xent(x_NxD @ w + b, y_N)
  grad = np.concatenate([dlogits.sum(axis=0), (x_NxD.T @ dlogits).ravel()])
  l2 = theta_P.dtype.type(l2)
  return loss + l2 / 2 * np.dot(theta_P, theta_P), grad + l2 * theta_P


def make_mlp_loss_grad(hidden: int = 200, num_classes: int = 10) -> Callable:
  """(f_m, grad f_m) of input -> `hidden` ReLU units -> softmax."""

  def loss_grad(theta_P, x_NxD, y_N, l2):
    dim = x_NxD.shape[1]
    sizes = [hidden, dim * hidden, num_classes, hidden * num_classes]
    b1, w1, b2, w2 = np.split(theta_P, np.cumsum(sizes)[:-1])
    w1 = w1.reshape(dim, hidden)
    w2 = w2.reshape(hidden, num_classes)
    pre = x_NxD @ w1 + b1
    act = np.maximum(pre, 0)
    loss, dlogits = _softmax_xent(act @ w2 + b2, y_N)
    dact = (dlogits @ w2.T) * (pre > 0)
    grad = np.concatenate([dact.sum(axis=0), (x_NxD.T @ dact).ravel(),
                           dlogits.sum(axis=0), (act.T @ dlogits).ravel()])
    l2 = theta_P.dtype.type(l2)
    return loss + l2 / 2 * np.dot(theta_P, theta_P), grad + l2 * theta_P

  return loss_grad


# ---------------------------------------------------------------------------
# The rule.


def quantize(grad_P: np.ndarray, ref_P: np.ndarray, bits: int):
  """The innovation quantizer: (Q, e = ||Q - g||^2, R), spec step 2."""
  innovation = grad_P - ref_P
  radius = np.max(np.abs(innovation))
  if radius == 0:
    return ref_P.copy(), grad_P.dtype.type(0), radius
  dtype = grad_P.dtype.type
  levels = dtype(2.0**bits - 1)  # 1 / tau
  spacing = 2 * radius / levels  # 2 tau R
  # q = floor((g - Qhat + R) / (2 tau R) + 1/2), evaluated as
  # floor((u + 1) (2^b - 1) / 2 + 1/2) with u = (g - Qhat) / R, which is exact
  # where it matters: u = 0 (2^b - 1 is odd, so a zero innovation lies exactly
  # on a midpoint and must round up to 2^(b-1)) and u = +-1. Dividing by the
  # rounded spacing instead gives 7.4999... -> 7 for b = 4, and MNIST's
  # always-blank pixels make zero innovations common.
  unit = innovation / radius
  codes = np.floor((unit + 1) * (levels / 2) + dtype(0.5))
  # |u| <= kappa is a zero innovation up to summation noise: the tie, code
  # 2^(b-1) (kappa = 1e-9 in float64, 1e-5 in float32).
  kappa = 1e-9 if grad_P.dtype == np.float64 else 1e-5
  codes = np.where(np.abs(unit) <= kappa, dtype(2.0**(bits - 1)), codes)
  codes = np.clip(codes, 0, levels)
  value = ref_P + spacing * codes - radius
  error = np.sum(np.square(value - grad_P))
  return value, error, radius


def upload_bits(num_params: int, hyper: Hyper) -> int:
  """b * p + 32 quantized, 32 * p at full precision."""
  return hyper.bits * num_params + 32 if hyper.quantize else 32 * num_params


def step(state: State, grads_MxP: np.ndarray, hyper: Hyper) -> dict:
  """One iteration k (spec steps 2-4 and the server step); updates `state`.

  Returns:
    This step's per-worker statistics: 'sent', 'bits', 'innovation',
    'threshold', 'error' (each [M]).
  """
  num_workers, num_params = grads_MxP.shape
  dtype = state.theta_P.dtype.type
  alpha = dtype(hyper.step_size)
  memory = state.history_D.size
  shared = (dtype(hyper.xi) / memory) * np.sum(state.history_D) / (
      alpha * alpha * num_workers * num_workers)
  stats = {k: np.zeros(num_workers, dtype) for k in
           ('innovation', 'threshold', 'error')}
  stats['sent'] = np.zeros(num_workers, bool)
  stats['bits'] = np.zeros(num_workers, np.int64)
  for m in range(num_workers):
    grad = grads_MxP[m]
    last = state.last_upload_MxP[m]
    if hyper.quantize:
      value, error, _ = quantize(grad, last, hyper.bits)
    else:
      value, error = grad, dtype(0)
    innovation = np.sum(np.square(value - last))
    rhs = (shared + dtype(hyper.err_weight) * (error + state.last_error_M[m])
           + dtype(hyper.threshold_offset))
    sent = ((not hyper.lazy) or innovation >= rhs
            or state.clock_M[m] >= hyper.max_staleness)
    if sent:
      state.aggregate_P += value - last
      state.last_upload_MxP[m] = value
      state.last_error_M[m] = error
      state.clock_M[m] = 0
    else:
      state.clock_M[m] += 1
    stats['innovation'][m] = innovation
    stats['threshold'][m] = rhs
    stats['error'][m] = error
    stats['sent'][m] = sent
    stats['bits'][m] = upload_bits(num_params, hyper) if sent else 0
  new_theta = state.theta_P - alpha * state.aggregate_P
  moved = np.sum(np.square(new_theta - state.theta_P))
  state.history_D = np.concatenate([[moved], state.history_D[:-1]]).astype(
      state.history_D.dtype)
  state.theta_P = new_theta
  return stats


def run(loss_grad: Callable, x_MxNxD: np.ndarray, y_MxN: np.ndarray,
        state: State, hyper: Hyper, num_steps: int):
  """Runs `num_steps` full-gradient iterations from `state` (updated in place).

  Args:
    loss_grad: (theta_P, x_NxD, y_N, l2) -> (f_m, grad f_m).
    x_MxNxD, y_MxN: worker shards; x's dtype is the precision.
    state: from `init`.
    hyper: the numbers of the run.
    num_steps: iterations.

  Returns:
    (state, trace) where trace['loss'] is [T], f(theta^k) before each step,
    and 'sent', 'bits', 'innovation', 'threshold', 'error' are [T, M].
  """
  rows = []
  num_workers = x_MxNxD.shape[0]
  for _ in range(num_steps):
    losses, grads = zip(*(loss_grad(state.theta_P, x_MxNxD[m], y_MxN[m],
                                    hyper.l2) for m in range(num_workers)))
    grads_MxP = np.stack(grads)
    stats = step(state, grads_MxP, hyper)
    stats['loss'] = np.sum(losses)
    rows.append(stats)
  trace = {k: np.stack([r[k] for r in rows]) for k in rows[0]} if rows else {}
  return state, trace
