"""A slow, independent NumPy transcription of shared/laq-spec.md, for tests.

Written loop by loop from the spec text (not from laq_jax), for multinomial
logistic regression with hand-derived gradients, in float64.
"""

import numpy as np


def unpack(theta, dim, classes):
  # Same flat layout as jax.flatten_util.ravel_pytree({'b': ..., 'w': ...}).
  return theta[:classes], theta[classes:].reshape(dim, classes)


def shard_loss_and_grad(theta, x, y, lam, classes):
  b, w = unpack(theta, x.shape[1], classes)
  logits = x @ w + b
  logits = logits - logits.max(axis=1, keepdims=True)
  p = np.exp(logits)
  p /= p.sum(axis=1, keepdims=True)
  n = x.shape[0]
  loss = -np.mean(np.log(p[np.arange(n), y])) + 0.5 * lam * theta @ theta
  p[np.arange(n), y] -= 1.0
  grad_w = x.T @ p / n
  grad_b = p.sum(axis=0) / n
  return loss, np.concatenate([grad_b, grad_w.ravel()]) + lam * theta


def quantize(g, ref, bits):
  r = np.max(np.abs(g - ref))
  if r == 0:
    return ref.copy(), 0.0
  tau = 1.0 / (2.0**bits - 1)
  q = np.floor((g - ref + r) / (2 * tau * r) + 0.5)
  # A zero innovation is an exact tie (2^b - 1 is odd); exact arithmetic
  # rounds it up to 2^(b-1), floats may not.
  q[g - ref == 0] = 2.0**(bits - 1)
  value = ref + 2 * tau * r * q - r
  return value, float(np.sum((value - g) ** 2))


def run(x_mnd, y_mn, *, steps, alpha, bits, quantize_on, lazy_on, lam=0.01,
        memory=10, xi=0.8, c_e=3.0, c_0=0.0, tbar=100, classes=10,
        batches=None):
  """Returns dict of per-step loss [T], sent [T, M], bits [T, M], theta."""
  m_workers, _, dim = x_mnd.shape
  p = dim * classes + classes
  theta = np.zeros(p)
  qhat = np.zeros((m_workers, p))
  ehat = np.zeros(m_workers)
  # Algorithm 1 of the paper starts from every worker's upload at theta^0: a
  # worker that never uploaded is infinitely stale.
  clock = np.full(m_workers, np.inf)
  agg = np.zeros(p)
  hist = np.zeros(memory)  # hist[d-1] = h_d
  losses, sent_all, bits_all = [], [], []
  for k in range(steps):
    loss = 0.0
    sent = np.zeros(m_workers, bool)
    bits_k = np.zeros(m_workers, np.int64)
    rhs_hist = sum(xi / memory * hist[d] for d in range(memory)) / (
        alpha**2 * m_workers**2)
    for m in range(m_workers):
      f_m, g = shard_loss_and_grad(theta, x_mnd[m], y_mn[m], lam, classes)
      loss += f_m
      if batches is not None:
        idx = batches[k][m]
        _, g = shard_loss_and_grad(theta, x_mnd[m][idx], y_mn[m][idx], lam,
                                   classes)
      if quantize_on:
        q, e = quantize(g, qhat[m], bits)
      else:
        q, e = g, 0.0
      upload = True
      if lazy_on:
        lhs = np.sum((q - qhat[m]) ** 2)
        upload = lhs >= rhs_hist + c_e * (e + ehat[m]) + c_0 or clock[m] >= tbar
      if upload:
        agg += q - qhat[m]
        qhat[m] = q
        ehat[m] = e
        clock[m] = 0
        sent[m] = True
        bits_k[m] = bits * p + 32 if quantize_on else 32 * p
      else:
        clock[m] += 1
    new_theta = theta - alpha * agg
    hist = np.concatenate([[np.sum((new_theta - theta) ** 2)], hist[:-1]])
    theta = new_theta
    losses.append(loss)
    sent_all.append(sent)
    bits_all.append(bits_k)
  return dict(loss=np.array(losses), sent=np.array(sent_all),
              bits=np.array(bits_all), theta=theta)
