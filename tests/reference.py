"""A slow, independent NumPy transcription of docs/algorithm.md, for tests.

Written loop by loop from the algorithm's text (not from laq_jax), for
multinomial logistic regression with hand-derived gradients, in float64. The
random compressors take their uniform draws as an input (the test supplies
the numbers of the documented keys), so only the arithmetic is compared.
"""

import math

import numpy as np

TIE = 1e-9  # kappa for float64: |v_i| <= kappa R is a zero innovation


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
  """LAQ's quantizer: (Q, e) for gradient g and reference ref."""
  r = np.max(np.abs(g - ref))
  if r == 0:
    return ref.copy(), 0.0
  tau = 1.0 / (2.0**bits - 1)
  q = np.floor((g - ref + r) / (2 * tau * r) + 0.5)
  # A zero innovation is an exact tie (2^b - 1 is odd); exact arithmetic
  # rounds it up to 2^(b-1). Within kappa R of zero counts as zero.
  q[np.abs(g - ref) <= TIE * r] = 2.0**(bits - 1)
  value = ref + 2 * tau * r * q - r
  return value, float(np.sum((value - g) ** 2))


def gamma_length(level):
  """Bits of the Elias-gamma code of a positive integer."""
  return 2 * int(math.floor(math.log2(level))) + 1


def qsgd(v, s, uniforms):
  """QSGD with s levels, given one uniform draw per coordinate: (C(v), bits)."""
  norm = math.sqrt(float(np.sum(v * v)))
  out = np.zeros_like(v)
  bits = 32
  if norm == 0:
    return out, bits
  for i, vi in enumerate(v):
    scaled = s * abs(vi) / norm
    level = math.floor(scaled)
    if uniforms[i] < scaled - level:
      level += 1
    out[i] = norm * np.sign(vi) * level / s
    if level:
      bits += 1 + gamma_length(level)
  return out, bits


def rand_p(v, p, uniforms):
  """Random sparsification with keep probability p: (C(v), bits)."""
  keep = uniforms < p
  return np.where(keep, v / p, 0.0), 32 * int(keep.sum()) + 32


def run(x_mnd, y_mn, *, steps, alpha, bits, compressor='uniform',
        innovation=True, lazy_on=True, lam=0.01, memory=10, xi=0.8, c_e=3.0,
        c_0=0.0, tbar=100, classes=10, batches=None, levels=10_000,
        keep_prob=0.5, uniforms=None, authors_code=False):
  """The rule, loop by loop.

  Args:
    compressor: 'identity', 'uniform', 'qsgd' or 'rand_p'.
    innovation: compress g - Qhat (else g).
    lazy_on: the LAG/LAQ trigger (else every worker uploads).
    batches: batches[k][m] the minibatch indices of worker m at step k
      (None: full shards).
    uniforms: uniforms[k][m] the [P] uniform draws of worker m's random
      compressor at step k.
    authors_code: the authors' scripts: clocks start at 0, history weights
      xi / min(k, D), b*p bits per quantized upload.

  Returns:
    dict of per-step loss [T], grad_norm_sq [T], sent [T, M], bits [T, M]
    and the final theta.
  """
  m_workers, _, dim = x_mnd.shape
  p = dim * classes + classes
  theta = np.zeros(p)
  qhat = np.zeros((m_workers, p))
  ehat = np.zeros(m_workers)
  # Algorithm 1 of the paper starts from every worker's upload at theta^0: a
  # worker that never uploaded is infinitely stale.
  clock = np.zeros(m_workers) if authors_code else np.full(m_workers, np.inf)
  agg = np.zeros(p)
  hist = np.zeros(memory)  # hist[d-1] = h_d
  losses, norms, sent_all, bits_all = [], [], [], []
  for k in range(steps):
    loss = 0.0
    grad_sum = np.zeros(p)
    sent = np.zeros(m_workers, bool)
    bits_k = np.zeros(m_workers, np.int64)
    weight = xi / (max(min(k, memory), 1) if authors_code else memory)
    rhs_hist = sum(weight * hist[d] for d in range(memory)) / (
        alpha**2 * m_workers**2)
    for m in range(m_workers):
      f_m, g = shard_loss_and_grad(theta, x_mnd[m], y_mn[m], lam, classes)
      loss += f_m
      if batches is not None:
        idx = batches[k][m]
        _, g = shard_loss_and_grad(theta, x_mnd[m][idx], y_mn[m][idx], lam,
                                   classes)
      grad_sum += g
      ref = qhat[m] if innovation else np.zeros(p)
      if compressor == 'identity':
        q, cost = g, 32 * p
      elif compressor == 'uniform':
        q, _ = quantize(g, ref, bits)
        cost = bits * p + (0 if authors_code else 32)
      elif compressor == 'qsgd':
        c, cost = qsgd(g - ref, levels, uniforms[k][m])
        q = ref + c
      elif compressor == 'rand_p':
        c, cost = rand_p(g - ref, keep_prob, uniforms[k][m])
        q = ref + c
      else:
        raise ValueError(compressor)
      e = float(np.sum((q - g) ** 2))
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
        bits_k[m] = cost
      else:
        clock[m] += 1
    new_theta = theta - alpha * agg
    hist = np.concatenate([[np.sum((new_theta - theta) ** 2)], hist[:-1]])
    theta = new_theta
    losses.append(loss)
    norms.append(float(grad_sum @ grad_sum))
    sent_all.append(sent)
    bits_all.append(bits_k)
  return dict(loss=np.array(losses), grad_norm_sq=np.array(norms),
              sent=np.array(sent_all), bits=np.array(bits_all), theta=theta)
