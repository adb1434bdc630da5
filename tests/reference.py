"""The NumPy oracle: an independent transcription of docs/algorithm.md.

Written from the algorithm's text, not from laq_jax (it imports nothing of
it), and used by the tests (step by step against laq_jax) and by the
benchmarks (the NumPy baseline laq-jax is timed against, and a self-check).

- Models: multinomial logistic regression and one hidden layer of H ReLU
  units with a linear read-out, softmax cross-entropy, gradients written by
  hand. Parameters are one flat vector in laq_jax's layout (`layout`).
- The rule: every compressor of the docs (identity, uniform, qsgd, rand_p),
  compressing the innovation g - Qhat or g itself, the lazy trigger with its
  clock, full shards or given minibatches, and `authors_code`.
- Precision: everything is computed in the dtype of the data (float32 or
  float64), so a float32 run is a float32 run, timed as such.
- Random numbers are inputs: the minibatch indices and the random
  compressors' uniform draws are passed in (a test supplies the numbers of
  laq_jax's documented keys), so only the arithmetic is compared.

Written for reading: a Python loop over workers, vectorized within a worker.
"""

import math

import numpy as np

# kappa of the quantizer's tie rule: |g_i - Qhat_i| <= kappa R is a zero
# innovation (docs/algorithm.md, "The compressors").
TIE = 1e-9  # float64
TIE_FLOAT32 = 1e-5

MODELS = ('logreg', 'mlp')
COMPRESSORS = ('identity', 'uniform', 'qsgd', 'rand_p')

# The presets of docs/algorithm.md ("The presets"): name -> (minibatch
# gradients, compressor, compresses the innovation, lazy).
PRESETS = {
    'gd': (False, 'identity', False, False),
    'qgd': (False, 'uniform', True, False),
    'lag': (False, 'identity', False, True),
    'laq': (False, 'uniform', True, True),
    'sgd': (True, 'identity', False, False),
    'sqgd': (True, 'uniform', True, False),
    'slag': (True, 'identity', False, True),
    'slaq': (True, 'uniform', True, True),
    'qsgd': (True, 'qsgd', False, False),
    'ssgd': (True, 'rand_p', False, False),
}


def preset(name):
  """`run`'s compressor, innovation and lazy_on arguments for a preset."""
  _, compressor, innovation, lazy = PRESETS[name]
  return dict(compressor=compressor, innovation=innovation, lazy_on=lazy)


def tie_tolerance(dtype):
  """kappa for the dtype: 1e-9 in float64, 1e-5 in float32."""
  return TIE if np.dtype(dtype) == np.float64 else TIE_FLOAT32


# ---------------------------------------------------------------------------
# Models: f_m(theta) = mean softmax cross-entropy + (lam / 2) ||theta||^2.


def layout(model, dim, classes, hidden=None):
  """[(name, shape)] of the flat parameter vector, in order.

  laq_jax flattens its parameters with jax.flatten_util.ravel_pytree, whose
  dict keys come in sorted order, each array row-major:
    logreg: b (C), w (D x C)
    mlp:    hidden.bias (H), hidden.kernel (D x H), out.bias (C),
            out.kernel (H x C)
  """
  if model == 'logreg':
    return [('b', (classes,)), ('w', (dim, classes))]
  if model == 'mlp':
    if not hidden:
      raise ValueError('the MLP needs its number of hidden units')
    return [('hidden.bias', (hidden,)), ('hidden.kernel', (dim, hidden)),
            ('out.bias', (classes,)), ('out.kernel', (hidden, classes))]
  raise ValueError(f'unknown model {model!r}; allowed: {", ".join(MODELS)}')


def num_params(model, dim, classes, hidden=None):
  return sum(math.prod(shape) for _, shape in
             layout(model, dim, classes, hidden))


def unpack(theta, shapes):
  """{name: view of theta} for a `layout`."""
  params, start = {}, 0
  for name, shape in shapes:
    size = math.prod(shape)
    params[name] = theta[start:start + size].reshape(shape)
    start += size
  assert start == theta.size, (start, theta.size)
  return params


def softmax_xent(logits, y):
  """(mean cross-entropy of the integer labels y, its gradient in logits)."""
  n = logits.shape[0]
  rows = np.arange(n)
  shifted = logits - logits.max(axis=1, keepdims=True)
  exp = np.exp(shifted)
  total = exp.sum(axis=1, keepdims=True)
  loss = np.mean(np.log(total[:, 0]) - shifted[rows, y])
  dlogits = exp / total  # softmax
  dlogits[rows, y] -= 1
  return loss, dlogits / n


def logreg_xent(theta, x, y, classes, hidden=None):
  """Cross-entropy of logits x w + b, and its gradient (flat)."""
  del hidden
  p = unpack(theta, layout('logreg', x.shape[1], classes))
  loss, d_logits = softmax_xent(x @ p['w'] + p['b'], y)
  return loss, np.concatenate([d_logits.sum(axis=0),
                               (x.T @ d_logits).ravel()])


def mlp_xent(theta, x, y, classes, hidden):
  """Cross-entropy of relu(x W1 + b1) W2 + b2, and its gradient (flat)."""
  p = unpack(theta, layout('mlp', x.shape[1], classes, hidden))
  pre = x @ p['hidden.kernel'] + p['hidden.bias']
  act = np.maximum(pre, 0)
  loss, d_logits = softmax_xent(act @ p['out.kernel'] + p['out.bias'], y)
  # relu'(0) = 0, as JAX differentiates it.
  d_pre = (d_logits @ p['out.kernel'].T) * (pre > 0)
  return loss, np.concatenate([
      d_pre.sum(axis=0), (x.T @ d_pre).ravel(),
      d_logits.sum(axis=0), (act.T @ d_logits).ravel()])


XENT = {'logreg': logreg_xent, 'mlp': mlp_xent}


def shard_loss_and_grad(theta, x, y, lam, classes, model='logreg',
                        hidden=None):
  """(f_m(theta), grad f_m(theta)) on the samples (x, y), in theta's dtype."""
  lam = theta.dtype.type(lam)
  loss, grad = XENT[model](theta, x, y, classes, hidden)
  return loss + lam / 2 * (theta @ theta), grad + lam * theta


# ---------------------------------------------------------------------------
# Compressors: C(v) and its bits.


def objective(theta, x_mnd, y_mn, lam, classes=10, model='logreg',
              hidden=None):
  """(f(theta), grad f(theta)) with f = sum_m f_m over the M shards."""
  value, grad = 0.0, np.zeros_like(theta)
  for x, y in zip(x_mnd, y_mn):
    f_m, g_m = shard_loss_and_grad(theta, x, y, lam, classes, model, hidden)
    value, grad = value + f_m, grad + g_m
  return value, grad


def quantize(g, ref, bits):
  """LAQ's b-bit quantizer of g - ref: (Q, e = ||Q - g||^2), in g's dtype."""
  dt = g.dtype.type
  v = g - ref
  r = np.max(np.abs(v))
  if r == 0:
    return ref.copy(), dt(0)
  levels = dt(2.0**bits) - 1  # 2^b - 1
  tau = 1 / levels
  q = np.floor((v + r) / (2 * tau * r) + dt(0.5))
  # A zero innovation is an exact tie (2^b - 1 is odd); exact arithmetic
  # rounds it up to 2^(b-1). Within kappa R of zero counts as zero.
  q[np.abs(v) <= tie_tolerance(g.dtype) * r] = 2.0**(bits - 1)
  q = np.clip(q, 0, levels)  # q lies in 0..2^b - 1 (a no-op in exact math)
  value = ref + 2 * tau * r * q - r
  return value, np.sum((value - g)**2)


def gamma_length(level):
  """Bits of the Elias-gamma code of a positive integer."""
  return 2 * int(math.floor(math.log2(level))) + 1


def qsgd(v, s, uniforms):
  """QSGD with s levels, given one uniform draw per coordinate: (C(v), bits)."""
  s = v.dtype.type(s)
  norm = np.sqrt(np.sum(v * v))
  if norm == 0:
    return np.zeros_like(v), 32
  scaled = s * np.abs(v) / norm
  level = np.floor(scaled)
  level += uniforms < scaled - level  # round up with the dropped fraction
  out = norm * np.sign(v) * level / s
  nonzero = level[level > 0].astype(np.float64)  # l <= 2^24: exact
  gamma = 2 * np.floor(np.log2(nonzero)) + 1  # gamma_length, vectorized
  return out, 32 + int(np.sum(1 + gamma))


def rand_p(v, p, uniforms):
  """Random sparsification with keep probability p: (C(v), bits)."""
  keep = uniforms < p
  return np.where(keep, v / v.dtype.type(p), 0), 32 * int(keep.sum()) + 32


# ---------------------------------------------------------------------------
# The rule.


def run(x_mnd, y_mn, *, steps, alpha, bits, compressor='uniform',
        innovation=True, lazy_on=True, lam=0.01, memory=10, xi=0.8, c_e=3.0,
        c_0=0.0, tbar=100, classes=10, batches=None, levels=10_000,
        keep_prob=0.5, uniforms=None, authors_code=False, model='logreg',
        hidden=None, theta0=None):
  """`steps` iterations of docs/algorithm.md's "One iteration", loop by loop.

  Args:
    x_mnd, y_mn: worker m's shard is (x_mnd[m], y_mn[m]); x's dtype (float32
      or float64) is the precision of everything.
    alpha, bits, lam, memory, xi, c_e, c_0, tbar, levels, keep_prob: the
      docs' alpha, b, lam, D, xi, c_e, c_0, tbar, s, p.
    compressor: 'identity', 'uniform', 'qsgd' or 'rand_p'.
    innovation: compress g - Qhat (else g).
    lazy_on: the LAG/LAQ trigger (else every worker uploads).
    batches: batches[k][m] the minibatch indices of worker m at step k
      (None: full shards).
    uniforms: uniforms[k][m] the [P] uniform draws of worker m's random
      compressor at step k.
    authors_code: the authors' scripts: clocks start at 0, history weights
      xi / min(k, D), b*p bits per quantized upload.
    model: 'logreg' or 'mlp' (with `hidden` ReLU units).
    theta0: the flat initial parameters (`layout`); None: zeros (logreg
      only: the MLP cannot start at zero).

  Returns:
    dict of per-step loss [T] (f(theta^k) on the full shards), grad_norm_sq
    [T] (||sum_m g_m||^2), sent [T, M], bits [T, M], innovation [T, M]
    (||Q - Qhat||^2), threshold [T, M] (the trigger's right side), error
    [T, M] (e), and the final theta.
  """
  dtype = x_mnd.dtype
  if dtype not in (np.float32, np.float64):
    raise ValueError(f'x must be float32 or float64, not {dtype}')
  dt = dtype.type
  m_workers, _, dim = x_mnd.shape
  p = num_params(model, dim, classes, hidden)
  if theta0 is None:
    if model != 'logreg':
      raise ValueError('the MLP needs theta0 (it cannot start at zero)')
    theta0 = np.zeros(p)
  theta = np.array(theta0, dtype)
  if theta.shape != (p,):
    raise ValueError(f'theta0 has shape {theta.shape}, the {model} {p}')
  alpha, lam, xi, c_e, c_0 = dt(alpha), dt(lam), dt(xi), dt(c_e), dt(c_0)
  loss_and_grad = lambda th, x, y: shard_loss_and_grad(th, x, y, lam, classes,
                                                       model, hidden)
  qhat = np.zeros((m_workers, p), dtype)
  ehat = np.zeros(m_workers, dtype)
  # Algorithm 1 of the paper starts from every worker's upload at theta^0: a
  # worker that never uploaded is infinitely stale.
  clock = np.zeros(m_workers) if authors_code else np.full(m_workers, np.inf)
  agg = np.zeros(p, dtype)
  hist = np.zeros(memory, dtype)  # hist[d-1] = h_d
  rows = []
  for k in range(steps):
    row = dict(loss=dt(0), grad_norm_sq=None,
               sent=np.zeros(m_workers, bool),
               bits=np.zeros(m_workers, np.int64),
               **{name: np.zeros(m_workers, dtype)
                  for name in ('innovation', 'threshold', 'error')})
    weight = xi / (max(min(k, memory), 1) if authors_code else memory)
    rhs_hist = weight * np.sum(hist) / (alpha**2 * m_workers**2)
    grad_sum = np.zeros(p, dtype)
    for m in range(m_workers):
      f_m, g = loss_and_grad(theta, x_mnd[m], y_mn[m])
      row['loss'] += f_m
      if batches is not None:
        idx = batches[k][m]
        _, g = loss_and_grad(theta, x_mnd[m][idx], y_mn[m][idx])
      grad_sum += g
      ref = qhat[m] if innovation else np.zeros(p, dtype)
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
      e = np.sum((q - g)**2)
      lhs = np.sum((q - qhat[m])**2)
      rhs = rhs_hist + c_e * (e + ehat[m]) + c_0
      upload = (not lazy_on) or lhs >= rhs or clock[m] >= tbar
      if upload:
        agg += q - qhat[m]
        qhat[m] = q
        ehat[m] = e
        clock[m] = 0
        row['sent'][m] = True
        row['bits'][m] = cost
      else:
        clock[m] += 1
      row['innovation'][m], row['threshold'][m], row['error'][m] = lhs, rhs, e
    new_theta = theta - alpha * agg
    moved = np.sum((new_theta - theta)**2)
    hist = np.concatenate([np.array([moved], dtype), hist[:-1]])
    theta = new_theta
    row['grad_norm_sq'] = grad_sum @ grad_sum
    rows.append(row)
  out = {name: np.array([r[name] for r in rows])
         for name in ('loss', 'grad_norm_sq', 'sent', 'bits', 'innovation',
                      'threshold', 'error')}
  out['theta'] = theta
  return out
