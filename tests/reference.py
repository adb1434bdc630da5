"""The NumPy oracle: an independent transcription of docs/algorithm.md.

Written from the algorithm's text, not from laq_jax (it imports nothing of
it), and used by the tests (step by step against laq_jax) and by the
benchmarks (the NumPy baseline laq-jax is timed against, and a self-check).

- Models: multinomial logistic regression and one hidden layer of H ReLU
  units with a linear read-out, softmax cross-entropy, gradients written by
  hand. Parameters are one flat vector in laq_jax's layout (`layout`).
- The rule: every compressor of the docs (identity, uniform, qsgd, rand_p)
  and of the family (/work/shared/compressors.md: top_k, sign, terngrad),
  compressing the innovation g - Qhat or g itself, with or without error
  feedback, the LAQ trigger with its clock or CLAG's or none, full shards or
  given minibatches, the quantized downlink of two-way LAQ, and
  `authors_code`.
- Precision: everything is computed in the dtype of the data (float32 or
  float64), so a float32 run is a float32 run, timed as such.
- Random numbers are inputs: the minibatch indices and the random
  compressors' uniform draws are passed in (a test supplies the numbers of
  laq_jax's documented keys), so only the arithmetic is compared; the
  minibatch draw's permutation is transcribed here too (`sample_rows`, from
  its round keys: tests/common.py's `batch_rows`).

Written for reading: a Python loop over workers, vectorized within a worker.
"""

import math

import numpy as np

# kappa of the quantizer's tie rule: |g_i - Qhat_i| <= kappa R is a zero
# innovation (docs/algorithm.md, "The compressors").
TIE = 1e-9  # float64
TIE_FLOAT32 = 1e-5

MODELS = ('logreg', 'mlp')
# In the order of the family's table (/work/shared/compressors.md).
COMPRESSORS = ('identity', 'uniform', 'qsgd', 'rand_p', 'top_k', 'sign',
               'terngrad', 'randk', 'top_k_b', 'randk_b', 'top_k_down')
TRIGGERS = ('eager', 'laq', 'clag', 'tpc_lazy')

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


def _fmix32(h):
  """murmur3's 32-bit finalizer on uint32 arrays (wrapping products)."""
  h = h ^ (h >> np.uint32(16))
  h = h * np.uint32(0x85EBCA6B)
  h = h ^ (h >> np.uint32(13))
  h = h * np.uint32(0xC2B2AE35)
  return h ^ (h >> np.uint32(16))


def sample_rows(round_keys, n, k):
  """A minibatch's rows (docs/algorithm.md, "One iteration"): pi(0), ...,
  pi(k - 1) for the Feistel permutation pi of range(n) under the given
  uint32 round keys (one per round), on 2h bits with 4^h the least power
  of 4 >= n (h >= 1), each value >= n permuted again until it is < n."""
  round_keys = np.asarray(round_keys, np.uint32)
  h = 1
  while 4 ** h < n:
    h += 1
  mask = np.uint32(2 ** h - 1)

  def permute(v):
    left, right = v >> np.uint32(h), v & mask
    for key in round_keys:
      left, right = right, left ^ (_fmix32(right ^ key) & mask)
    return (left << np.uint32(h)) | right

  v = permute(np.arange(k, dtype=np.uint32))
  while (v >= n).any():
    v = np.where(v >= n, permute(v), v)
  return v.astype(np.int64)


def preset(name):
  """`run`'s compressor, innovation and lazy_on arguments for a preset."""
  _, compressor, innovation, lazy = PRESETS[name]
  return dict(compressor=compressor, innovation=innovation, lazy_on=lazy)


def _member(minibatch, compressor, innovation, error_feedback, trigger,
            downlink=False, server='sgd', client='gradient', absent='stale',
            weighting='sum', warm_start=False, estimator=None,
            compressor_b='identity'):
  return dict(minibatch=minibatch, compressor=compressor,
              innovation=innovation, error_feedback=error_feedback,
              trigger=trigger, downlink=downlink, server=server,
              client=client, absent=absent, weighting=weighting,
              warm_start=warm_start, compressor_b=compressor_b,
              estimator=estimator or ('innovation' if innovation
                                      else 'direct'))


def _fed(compressor='identity', innovation=False, trigger='eager',
         server='sgd', client='local', weighting='samples'):
  """A preset with local work (/work/shared/local-steps.md): absent
  clients dropped, the uploads' mean weighted by sample counts."""
  return _member(True, compressor, innovation, False, trigger, server=server,
                 client=client, absent='drop', weighting=weighting)


# The family's presets (/work/shared/compressors.md, "Presets the field
# knows"): the ten of PRESETS (lazy ones on LAQ's trigger) and the new ones.
# downlink: the server's broadcast goes through the b-bit uniform quantizer.
FAMILY = {
    **{name: _member(minibatch, compressor, innovation, False,
                     'laq' if lazy else 'eager')
       for name, (minibatch, compressor, innovation, lazy) in PRESETS.items()},
    # TernGrad, Wen et al. 2017.
    'terngrad': _member(True, 'terngrad', False, False, 'eager'),
    # EF-SignSGD, Karimireddy et al. 2019.
    'ef_signsgd': _member(True, 'sign', False, True, 'eager'),
    # Top-k with error feedback (DGC's core), Stich et al. 2018; Lin et al.
    # 2018.
    'topk_ef': _member(True, 'top_k', False, True, 'eager'),
    # EF21, Richtarik, Sokolov, Fatkhullin 2021 (and its minibatch variant).
    'ef21': _member(False, 'top_k', True, False, 'eager'),
    'ef21_sgd': _member(True, 'top_k', True, False, 'eager'),
    # CLAG, Richtarik et al. 2022 (3PC).
    'clag': _member(False, 'top_k', True, False, 'clag'),
    # Two-way LAQ, Sun et al., TPAMI 2020: the broadcast is quantized too.
    'two_laq': _member(False, 'uniform', True, False, 'laq', downlink=True),
    # LASG (Chen, Sun, Yin 2020) and CADA (Chen, Guo, Sun, Yin 2021):
    # /work/shared/lasg-cada.md; their oracle is `run_lasg`.
    **{f'lasg_{rule}{q}': _member(True, 'uniform' if q else 'identity',
                                  bool(q), False, f'lasg_{rule}')
       for rule in ('wk2', 'wk1', 'ps') for q in ('', '_laq')},
    'cada1': _member(True, 'identity', False, False, 'cada_wk1',
                     server='cada_amsgrad'),
    'cada2': _member(True, 'identity', False, False, 'cada_wk2',
                     server='cada_amsgrad'),
    'cada_adam': _member(True, 'identity', False, False, 'eager',
                         server='cada_amsgrad'),
    'cada1_mnist': _member(True, 'identity', False, False, 'lasg_wk1',
                           server='cada_amsgrad_mnist'),
    'cada2_mnist': _member(True, 'identity', False, False, 'lasg_wk2',
                           server='cada_amsgrad_mnist'),
    **{f'{name}_typo': _member(True, 'identity', False, False, trigger,
                               server='cada_amsgrad_mnist_typo')
       for name, trigger in (('cada1_mnist', 'lasg_wk1'),
                             ('cada2_mnist', 'lasg_wk2'),
                             ('cada_adam', 'eager'))},
    # Local work (/work/shared/local-steps.md): the upload is the model
    # change after K local steps; their oracle is `run_local`.
    'fedavg': _fed(),  # McMahan et al. 2017
    'fedavgm': _fed(server='momentum'),  # Hsu, Qi, Brown 2019
    'fedadam': _fed(server='fedadam'),  # Reddi et al. 2021
    'fedyogi': _fed(server='fedyogi'),
    'fedprox': _fed(),  # Li et al. 2020: mu > 0
    'scaffold': _fed(client='scaffold'),  # Karimireddy et al. 2020
    'fedpaq': _fed('qsgd'),  # Reisizadeh et al. 2020
    'local_sgd': _fed(weighting='uniform'),
    'fedlaq': _fed('uniform', True, 'laq'),
    # After LAQ (/work/shared/after-laq.md, section 1): the 3PC paper's
    # EF21, LAG and CLAG, each worker's first upload g itself.
    'tpc_ef21': _member(False, 'top_k', True, False, 'eager',
                        warm_start=True),
    'tpc_lag': _member(False, 'identity', True, False, 'tpc_lazy',
                       warm_start=True),
    'tpc_clag': _member(False, 'top_k', True, False, 'tpc_lazy',
                        warm_start=True),
    # Its v1-v5 and MARINA: `run`'s `estimator` (sections 1 and 2).
    **{name: _member(False, compressor, False, False, 'eager',
                     warm_start=True, estimator=estimator,
                     compressor_b=second)
       for name, compressor, estimator, second in (
           ('tpc_v1', 'top_k', 'tpc_v1', 'identity'),
           ('tpc_v2', 'top_k', 'tpc_v2', 'randk_b'),
           ('tpc_v3', 'top_k', 'tpc_v3', 'identity'),
           ('tpc_v4', 'top_k', 'tpc_v4', 'top_k_b'),
           ('tpc_v5', 'top_k', 'marina', 'identity'),
           ('marina', 'randk', 'marina', 'identity'),
           ('dasha', 'randk', 'dasha', 'identity'))},
    'dasha_mvr': _member(True, 'randk', False, False, 'eager',
                         warm_start=True, estimator='dasha_mvr'),
    # EF21-P (section 4): the broadcast thetahat + top-k(theta - thetahat).
    'ef21_p_diana': _member(False, 'randk', False, False, 'eager',
                            downlink=True, warm_start=True,
                            estimator='diana'),
    'ef21_p_dcgd': _member(False, 'randk', False, False, 'eager',
                           downlink=True, warm_start=True),
    # EF21-BC (section 4): EF21 up, the server's G + top-k(agg - G) down.
    'ef21_bc': _member(False, 'top_k', True, False, 'eager', downlink=True,
                       server='ef21bc_server', warm_start=True),
    # FedNova (section 7): local work normalized; its oracle `run_fednova`.
    # Scaffnew (section 5): its oracle `run_scaffnew`.
    'scaffnew': _fed(weighting='uniform', client='scaffnew'),
    # FedDyn (section 6): its oracle `run_feddyn`.
    'feddyn': _fed(weighting='uniform', client='feddyn',
                   server='feddyn_server'),
    'fednova': _fed(weighting='uniform', client='fednova'),
    'fednova_momentum': _fed(weighting='uniform', client='fednova'),
}


def family(name, bits):
  """`run`'s arguments for a FAMILY preset at b = `bits` (compressors.md)."""
  f = FAMILY[name]
  return dict(compressor=f['compressor'], innovation=f['innovation'],
              trigger=f['trigger'], error_feedback=f['error_feedback'],
              downlink_bits=bits if f['downlink'] else 0,
              warm_start=f['warm_start'])


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


def qsgd_authors(v, s, uniforms):
  """The authors' quantr (TPAMI-LAQ SGD/lasterrsgdDNN.py), loop by loop, with
  `uniforms` as its rr draws: (C(v), bits, rounded to an integer)."""
  norv = np.sqrt(v.dot(v))
  if norv == 0:
    return np.zeros_like(v), 0
  norvec = v / norv
  q = np.zeros(len(v))
  nbit = 0.0
  kappa = 1e-9 if v.dtype == np.float64 else 1e-5  # laq_jax's tie rule
  for i in range(len(v)):
    sign = 1 if norvec[i] >= 0 or abs(norvec[i]) <= kappa else -1
    k = int(abs(norvec[i]) * s) + 1
    rr = uniforms[i]
    # theirs: if rr > k - |norvec_i| s: q = sign (k - 1), else sign k; with
    # rr uniform on [0, 1) both this and ours read "up iff rr <= 1 - frac".
    if rr > k - abs(norvec[i] * s):
      q[i] = sign * (k - 1)
    else:
      q[i] = sign * k
    tem = abs(q[i])
    while tem >= 2:
      tem = math.log2(tem)
      nbit += tem
  return (q / s * norv).astype(v.dtype), int(round(nbit))


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
  bits, previous = 32, -1
  for i in np.flatnonzero(level > 0):  # gap to the previous nonzero, sign, level
    bits += gamma_length(i - previous) + 1 + gamma_length(int(level[i]))
    previous = i
  return out, bits


def rand_p(v, p, uniforms):
  """Random sparsification with keep probability p: (C(v), bits)."""
  keep = uniforms < p
  return np.where(keep, v / v.dtype.type(p), 0), 32 * int(keep.sum()) + 32


def top_k_count(top_k, p):
  """top_k's k from a fraction of p or a count, in 1..p (compressors.md)."""
  if top_k <= 0:
    raise ValueError(f'top_k must be positive, not {top_k}')
  if top_k < 1:
    return max(1, int(math.floor(top_k * p + 0.5)))
  return min(int(top_k), p)


def top_k(v, k):
  """Top-k (Stich et al. 2018): the k largest |v_i|, ties to the lowest i."""
  p = v.size
  if not 1 <= k <= p:
    raise ValueError(f'k must be in 1..{p}, not {k}')
  # A stable sort of -|v_i| keeps equal magnitudes in index order, so the
  # first k positions are the k largest, the earliest among ties.
  order = np.argsort(-np.abs(v), kind='stable')
  out = np.zeros_like(v)
  out[order[:k]] = v[order[:k]]
  index_bits = (p - 1).bit_length()  # ceil(log2 p), exactly
  return out, k * (32 + index_bits)


def randk(v, k, uniforms):
  """Rand-K (/work/shared/after-laq.md, section 0): the k coordinates of
  the k smallest uniforms (ties to the lowest i), scaled by p / k; 32 k
  bits for the values and 32 for the seed."""
  p = v.size
  keep = np.argsort(uniforms, kind='stable')[:k]
  out = np.zeros_like(v)
  out[keep] = (v.dtype.type(p) / v.dtype.type(k)) * v[keep]
  return out, 32 * k + 32


def _sparsify(name, v, k_top, k_rand, uniforms):
  """(C(v), bits) for the sparsifiers of the after-LAQ presets: top-k (and
  its copies top_k_b, top_k_down) at k_top, Rand-K (and randk_b) at k_rand
  on these uniforms."""
  if name in ('top_k', 'top_k_b', 'top_k_down'):
    return top_k(v, k_top)
  if name in ('randk', 'randk_b'):
    return randk(v, k_rand, uniforms)
  raise ValueError(name)


def _shifted(estimator, g, qhat, h, started, k, m, p, dtype, compressor,
             k_top, k_rand, uniforms, dasha_a, diana_beta):
  """(Q, bits, the new h) of a DASHA or DIANA worker (`run`)."""
  k_c = k_rand if compressor == 'randk' else k_top
  omega = dtype.type(p) / dtype.type(k_c) - 1
  compress = lambda v: _sparsify(compressor, v, k_top, k_rand, uniforms[k][m])
  if estimator == 'dasha':
    a = dtype.type(dasha_a) if dasha_a > 0 else 1 / (2 * omega + 1)
    c, cost = compress(g - h - a * (qhat - h))
    return qhat + c, cost, g.copy()
  beta = dtype.type(diana_beta) if diana_beta > 0 else 1 / (omega + 1)
  c, cost = compress(g - h)
  return h + c, cost, (h + beta * c) if started else g.copy()


def _three_pc(estimator, g, qhat, y, k, m, p, dtype, compressor, k_top,
              k_rand, uniforms, compressor_b, k_b, uniforms_b, coins,
              marina_p, zeta_v3):
  """(Q, bits) of one 3PC-family worker (`run`'s `estimator`)."""
  c_main = lambda v: _sparsify(compressor, v, k_top, k_rand, uniforms[k][m])
  c_second = lambda v: _sparsify(compressor_b, v, k_b, k_b,
                                 uniforms_b and uniforms_b[k][m])

  if estimator == 'tpc_v1':
    c, cost = c_main(g - y)
    return y + c, cost
  if estimator == 'tpc_v2':
    qb, cost_b = c_second(g - y)
    b = qhat + qb
    c, cost = c_main(g - b)
    return b + c, cost_b + cost
  if estimator == 'tpc_v3':
    fires = np.sum((g - qhat)**2) > dtype.type(zeta_v3) * np.sum((g - y)**2)
    b = g if fires else qhat
    c, cost = c_main(g - b)
    return b + c, 32 * p if fires else cost
  if estimator == 'tpc_v4':
    c2, cost_b = c_second(g - qhat)
    b = qhat + c2
    c, cost = c_main(g - b)
    return b + c, cost_b + cost
  if estimator == 'marina':
    k_c = k_rand if compressor == 'randk' else k_top
    prob = dtype.type(marina_p) if marina_p > 0 else (
        dtype.type(k_c) / dtype.type(p))
    c, cost = c_main(g - y)
    if coins[k] < prob:
      return g.copy(), 32 * p
    return qhat + c, cost
  raise ValueError(estimator)


def sign(v):
  """Scaled sign (Karimireddy et al. 2019): (||v||_1 / p) sign(v): (C, bits).

  |v_i| <= kappa max|v| counts as 0 (sign 0), the quantizer's tie rule: a
  coordinate zero in exact arithmetic must not take the sign of rounding
  noise.
  """
  p = v.size
  scale = np.sum(np.abs(v)) / v.dtype.type(p)
  signs = np.sign(v)
  signs[np.abs(v) <= tie_tolerance(v.dtype) * np.max(np.abs(v))] = 0
  return scale * signs, p + 32


def terngrad(v, uniforms):
  """TernGrad (Wen et al. 2017): max|v| sign(v_i) [u_i < |v_i|/max|v|]."""
  p = v.size
  s = np.max(np.abs(v))
  if s == 0:
    return np.zeros_like(v), 2 * p + 32
  keep = uniforms < np.abs(v) / s
  return np.where(keep, s * np.sign(v), 0).astype(v.dtype), 2 * p + 32


_top_k = top_k  # `run`'s argument top_k (the fraction or count) hides it


# ---------------------------------------------------------------------------
# The rule.


def run(x_mnd, y_mn, *, steps, alpha, bits, compressor='uniform',
        innovation=True, lazy_on=True, lam=0.01, memory=10, xi=0.8, c_e=3.0,
        c_0=0.0, tbar=100, classes=10, batches=None, levels=10_000,
        keep_prob=0.5, uniforms=None, authors_code=False, model='logreg',
        hidden=None, theta0=None, top_k=0.01, error_feedback=False,
        trigger=None, zeta=1.0, downlink_bits=0, xi_schedule=(),
        minibatch_scripts=False, warm_start=False, randk_k=0.09,
        estimator=None, compressor_b=None, k_b=0.01, uniforms_b=None,
        coins=None, marina_p=0.0, zeta_v3=1.0, dasha_a=0.0, diana_beta=0.0,
        broadcast_top_k=None, server_top_k=None, mvr_b=0.1):
  """`steps` iterations of docs/algorithm.md's "One iteration", loop by loop.

  Extended to the family of /work/shared/compressors.md: error feedback,
  CLAG's trigger and two-way LAQ's quantized broadcast.

  Args:
    x_mnd, y_mn: worker m's shard is (x_mnd[m], y_mn[m]); x's dtype (float32
      or float64) is the precision of everything.
    alpha, bits, lam, memory, xi, c_e, c_0, tbar, levels, keep_prob: the
      docs' alpha, b, lam, D, xi, c_e, c_0, tbar, s, p.
    compressor: one of COMPRESSORS ('identity', 'uniform', 'qsgd', 'rand_p',
      'top_k', 'sign', 'terngrad').
    innovation: compress g - Qhat (else g).
    lazy_on: the LAG/LAQ trigger (else every worker uploads); used only when
      `trigger` is None.
    batches: batches[k][m] the minibatch indices of worker m at step k
      (None: full shards).
    uniforms: uniforms[k][m] the [P] uniform draws of worker m's random
      compressor (qsgd, rand_p, terngrad) at step k.
    authors_code: the authors' scripts: clocks start at 0, history weights
      xi / min(k, D), b*p bits per quantized upload.
    model: 'logreg' or 'mlp' (with `hidden` ReLU units).
    theta0: the flat initial parameters (`layout`); None: zeros (logreg
      only: the MLP cannot start at zero).
    top_k: top_k's k, a fraction of p or a count (`top_k_count`); also
      top_k_b's.
    randk_k: randk's k, the same way.
    estimator: None (`innovation` decides: Qhat + C(g - Qhat) or C(g)), or
      one of the 3PC family's (/work/shared/after-laq.md, section 1 and 2;
      y_m the worker's gradient at its last step, 0 before): 'tpc_v1'
      (y + C(g - y)), 'tpc_v2' (b = Qhat + Q(g - y), b + C(g - b)),
      'tpc_v3' (b = g if ||g - Qhat||^2 > zeta_v3 ||g - y||^2 else Qhat,
      b + C(g - b); 32 p bits when it fires), 'tpc_v4' (b = Qhat +
      C2(g - Qhat), b + C(g - b)), 'marina' (g if coins[k] < p, else
      Qhat + C(g - y); p = marina_p, or k / p where that is 0, k the
      compressor's count). A difference added to the server's copy is
      compressed on its own (C(v), against 0).
    compressor_b, k_b, uniforms_b: the second compressor ('top_k_b' or
      'randk_b'), its k and its uniforms[k][m] (under the compressor key
      folded with 1).
    coins: coins[k], the round's shared uniform u_k (MARINA's coin).
      'dasha' (section 3: c = C(g - h - a (Qhat - h)), Q = Qhat + c,
      h <- g; a = dasha_a, or 1 / (2 omega + 1) where that is 0, omega =
      p / k - 1) and 'diana' (section 4: m = C(g - h), Q = h + m,
      h <- h + beta m, beta = diana_beta or 1 / (omega + 1); with the warm
      start the first step sets h = g) keep h_m in place of y_m.
    broadcast_top_k: EF21-P's broadcast, thetahat + top-k(theta -
      thetahat) with this k (a fraction of p or a count), k (32 +
      ceil(log2 p)) bits per worker; None: `downlink_bits` decides.
    mvr_b: DASHA-MVR's b (estimator 'dasha_mvr', section 3): h' = g +
      (1 - b)(h - g_prev), g_prev the worker's gradient at its previous
      parameters (theta^0 first) on this step's sample, c = C(h' - h -
      a (Qhat - h)), Q = Qhat + c, h <- h' (h = g at the warm start's
      first step).
    server_top_k: EF21-BC's server (section 4): G <- G + top-k(agg - G)
      with this k (G = agg at the warm start's first step), theta <- theta
      - alpha G; it broadcasts top-k(agg - G), k (32 + ceil(log2 p)) bits
      per worker (32 p the first step with the warm start), and the
      workers hold theta. None: theta <- theta - alpha agg.
    error_feedback: add the worker's error memory err_m to g before
      compressing; an upload sets err_m = u - Q.
    trigger: 'eager' (always upload), 'laq' (LAG/LAQ's rule with the clock)
      or 'clag' (upload iff ||g - Qhat_m||^2 > zeta h_1, or never uploaded);
      None: 'laq' if lazy_on else 'eager'.
    zeta: CLAG's zeta.
    downlink_bits: b of the server's quantized broadcast (two-way LAQ): the
      workers hold thetahat and compute their gradients there; 0: they hold
      theta itself (an unquantized broadcast of 32 p bits).
    xi_schedule: ((K1, C1), ...): xi times C_j from iteration K_j on.
    warm_start: a worker's first upload is its gradient uncompressed, 32 p
      bits (the 3PC family's start, /work/shared/after-laq.md section 0).
      'tpc_lazy' (the 3PC paper's LAG/CLAG test): upload iff
      ||g - Qhat_m||^2 > zeta ||g - y_m||^2, y_m the worker's gradient at
      its last step (0 before), or never uploaded.
    minibatch_scripts: with authors_code, the history of the authors'
      minibatch scripts (SLAQ.py, SGD/lasterrsgdDNN.py), copied loop by loop:
      a rolling buffer dtheta of the last D parameter steps, shifted at the
      top of each iteration k >= 1, read at columns k-d (k <= D) or D-d
      (k > D) for d = 1..D-1 with weights ksi[d, k] = xi/k, ksi[d, D] = xi/D.

  Returns:
    dict of per-step loss [T] (f(theta^k) on the full shards, at the server's
    theta), grad_norm_sq [T] (||sum_m g_m||^2, g_m at thetahat), sent [T, M],
    bits [T, M] (uplink), bits_down [T, M] (the broadcast after step k, per
    worker), innovation [T, M] (the trigger's left side: ||Q - Qhat||^2, or
    ||g - Qhat||^2 for 'clag'), threshold [T, M] (its right side: LAQ's for
    'laq' and 'eager', zeta h_1 for 'clag'), error [T, M] (e = ||Q - g||^2),
    the final theta and theta_hat (the workers' final parameters).
  """
  dtype = x_mnd.dtype
  if dtype not in (np.float32, np.float64):
    raise ValueError(f'x must be float32 or float64, not {dtype}')
  dt = dtype.type
  if compressor not in COMPRESSORS:
    raise ValueError(f'unknown compressor {compressor!r}; allowed: '
                     f'{", ".join(COMPRESSORS)}')
  if trigger is None:
    trigger = 'laq' if lazy_on else 'eager'
  if trigger not in TRIGGERS:
    raise ValueError(f'unknown trigger {trigger!r}; allowed: '
                     f'{", ".join(TRIGGERS)}')
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
  zeta = dt(zeta)
  k_top = top_k_count(top_k, p)
  k_rand = top_k_count(randk_k, p)
  loss_and_grad = lambda th, x, y: shard_loss_and_grad(th, x, y, lam, classes,
                                                       model, hidden)
  theta_hat = theta.copy()  # what the workers hold: thetahat^0 = theta^0
  qhat = np.zeros((m_workers, p), dtype)
  ehat = np.zeros(m_workers, dtype)
  err = np.zeros((m_workers, p), dtype)  # error feedback's memory
  y = np.zeros((m_workers, p), dtype)  # the 3PC test's last gradient
  h_shift = np.zeros((m_workers, p), dtype)  # DASHA's and DIANA's h_m
  started = np.zeros(m_workers, bool)
  theta_prev = np.tile(theta, (m_workers, 1))  # DASHA-MVR's theta^{k-1}
  # Algorithm 1 of the paper starts from every worker's upload at theta^0: a
  # worker that never uploaded is infinitely stale.
  clock = np.zeros(m_workers) if authors_code else np.full(m_workers, np.inf)
  agg = np.zeros(p, dtype)
  g_server = np.zeros(p, dtype)  # EF21-BC's G
  hist = np.zeros(memory, dtype)  # hist[d-1] = h_d
  buffer = np.zeros(memory, dtype)  # the scripts' dtheta, as squared norms
  rows = []
  for k in range(steps):
    xi_k = xi
    for start, factor in xi_schedule:
      if k >= start:
        xi_k = xi * dt(factor)
    if k >= 1:
      buffer[:memory - 1] = buffer[1:].copy()
      buffer[memory - 1] = hist[0]  # ||theta^k - theta^{k-1}||^2
    row = dict(loss=dt(0), grad_norm_sq=None,
               sent=np.zeros(m_workers, bool),
               bits=np.zeros(m_workers, np.int64),
               bits_down=np.zeros(m_workers, np.int64),
               **{name: np.zeros(m_workers, dtype)
                  for name in ('innovation', 'threshold', 'error')})
    weight = xi_k / (max(min(k, memory), 1) if authors_code else memory)
    rhs_hist = weight * np.sum(hist) / (alpha**2 * m_workers**2)
    if authors_code and minibatch_scripts:
      me = dt(0)
      for d in range(1, memory):
        if k - d >= 0:
          if k <= memory:
            me += (xi_k / k) * buffer[k - d]
          else:
            me += (xi_k / memory) * buffer[memory - d]
      rhs_hist = me / (alpha**2 * m_workers**2)
    grad_sum = np.zeros(p, dtype)
    for m in range(m_workers):
      # The loss is the server's f(theta^k); the gradient is at thetahat^k.
      f_m, g = loss_and_grad(theta, x_mnd[m], y_mn[m])
      row['loss'] += f_m
      if downlink_bits > 0 or broadcast_top_k is not None:
        _, g = loss_and_grad(theta_hat, x_mnd[m], y_mn[m])
      idx = slice(None)
      if batches is not None:
        idx = batches[k][m]
        _, g = loss_and_grad(theta_hat, x_mnd[m][idx], y_mn[m][idx])
      if estimator == 'dasha_mvr':
        _, g_prev = loss_and_grad(theta_prev[m], x_mnd[m][idx],
                                  y_mn[m][idx])
        theta_prev[m] = theta_hat
      grad_sum += g
      ref = qhat[m] if innovation else np.zeros(p, dtype)
      u = g + err[m] if error_feedback else g
      if compressor == 'identity':
        q, cost = u, 32 * p
      elif compressor == 'uniform':
        q, _ = quantize(u, ref, bits)
        cost = bits * p + (0 if authors_code else 32)
      elif compressor == 'qsgd':
        c, cost = (qsgd_authors if authors_code else qsgd)(
            u - ref, levels, uniforms[k][m])
        q = ref + c
      elif compressor == 'rand_p':
        c, cost = rand_p(u - ref, keep_prob, uniforms[k][m])
        q = ref + c
        cost -= 32 if authors_code else 0  # no seed in their count
      elif compressor in ('top_k', 'top_k_b', 'top_k_down'):
        c, cost = _top_k(u - ref, k_top)
        q = ref + c
      elif compressor in ('randk', 'randk_b'):
        c, cost = randk(u - ref, k_rand, uniforms[k][m])
        q = ref + c
      elif compressor == 'sign':
        c, cost = sign(u - ref)
        q = ref + c
      elif compressor == 'terngrad':
        c, cost = terngrad(u - ref, uniforms[k][m])
        q = ref + c
      else:
        raise ValueError(compressor)
      if estimator == 'dasha_mvr':
        k_c = k_rand if compressor == 'randk' else k_top
        a_mvr = (dt(dasha_a) if dasha_a > 0 else
                 1 / (2 * (dt(p) / dt(k_c) - 1) + 1))
        new_h = (g.copy() if warm_start and not started[m] else
                 g + (1 - dt(mvr_b)) * (h_shift[m] - g_prev))
        c, cost = _sparsify(compressor, new_h - h_shift[m] - a_mvr * (
            qhat[m] - h_shift[m]), k_top, k_rand, uniforms[k][m])
        q, h_shift[m], started[m] = qhat[m] + c, new_h, True
      elif estimator in ('dasha', 'diana'):
        q, cost, h_shift[m] = _shifted(
            estimator, g, qhat[m], h_shift[m], started[m] or not warm_start,
            k, m, p, dtype, compressor, k_top, k_rand, uniforms, dasha_a,
            diana_beta)
        started[m] = True
      elif estimator is not None:
        q, cost = _three_pc(estimator, g, qhat[m], y[m], k, m, p, dtype,
                            compressor, k_top, k_rand, uniforms,
                            compressor_b, top_k_count(k_b, p), uniforms_b,
                            coins, marina_p, zeta_v3)
      if warm_start and clock[m] == np.inf:  # the first upload: g itself
        q, cost = u, 32 * p
      e = np.sum((q - g)**2)
      if trigger == 'tpc_lazy':
        lhs = np.sum((g - qhat[m])**2)
        rhs = zeta * np.sum((g - y[m])**2)
        upload = lhs > rhs or clock[m] == np.inf
      elif trigger == 'clag':
        lhs = np.sum((g - qhat[m])**2)  # the uncompressed innovation
        rhs = zeta * hist[0]  # h_1 (0 at k = 0)
        # CLAG has no staleness bound: only a worker that never uploaded is
        # forced (none with authors_code, whose clocks start at 0).
        upload = lhs > rhs or clock[m] == np.inf
      else:
        lhs = np.sum((q - qhat[m])**2)
        rhs = rhs_hist + c_e * (e + ehat[m]) + c_0
        upload = trigger == 'eager' or lhs >= rhs or clock[m] >= tbar
      if upload:
        agg += q - qhat[m]
        qhat[m] = q
        ehat[m] = e
        clock[m] = 0
        if error_feedback:
          err[m] = u - q
        row['sent'][m] = True
        row['bits'][m] = cost
      else:
        clock[m] += 1
      y[m] = g  # the 3PC family's memory: every step, upload or skip
      row['innovation'][m], row['threshold'][m], row['error'][m] = lhs, rhs, e
    if server_top_k is not None:
      if warm_start and k == 0:
        g_server, cost_down = agg.copy(), 32 * p
      else:
        c, cost_down = _top_k(agg - g_server, top_k_count(server_top_k, p))
        g_server = g_server + c
      new_theta = theta - alpha * g_server
    else:
      new_theta = theta - alpha * agg
    moved = np.sum((new_theta - theta)**2)
    hist = np.concatenate([np.array([moved], dtype), hist[:-1]])
    theta = new_theta
    # The broadcast: the b-bit quantizer of theta^{k+1} - thetahat^k, whose
    # value is thetahat^k + the quantized innovation; or theta itself.
    if server_top_k is not None:  # the workers step with G themselves
      theta_hat = theta
      row['bits_down'][:] = cost_down
    elif broadcast_top_k is not None:
      c, cost_down = _top_k(theta - theta_hat, top_k_count(broadcast_top_k,
                                                           p))
      theta_hat = theta_hat + c
      row['bits_down'][:] = cost_down
    elif downlink_bits > 0:
      theta_hat, _ = quantize(theta, theta_hat, downlink_bits)
      row['bits_down'][:] = downlink_bits * p + 32
    else:
      theta_hat = theta
      row['bits_down'][:] = 32 * p
    row['grad_norm_sq'] = grad_sum @ grad_sum
    rows.append(row)
  out = {name: np.array([r[name] for r in rows])
         for name in ('loss', 'grad_norm_sq', 'sent', 'bits', 'bits_down',
                      'innovation', 'threshold', 'error')}
  out['theta'] = theta
  out['theta_hat'] = theta_hat.copy()
  return out


# ----------------------------------------------------------------------------
# LASG and CADA (/work/shared/lasg-cada.md; the authors' code, sunyuejiao/lasg
# and ChrisYZZ/CADA-master): a trigger that compares two gradients on the
# SAME sample, written from the contract, loop by loop, in the suite's units
# (g_m the mean over the worker's sample, the server steps with the sum).

LASG_TRIGGERS = ('eager', 'lasg_wk2', 'lasg_wk1', 'lasg_ps', 'cada_wk2',
                 'cada_wk1')


def run_lasg(x_mnd, y_mn, *, steps, alpha, trigger, batches=None,
             quantized=False, bits=4, server='sgd', lam=0.01, memory=10,
             xi=1.0, c_e=0.0, c_0=0.0, tbar=49, L=10.0, c=0.05, b1=0.9,
             b2=0.999, eps=1e-7, classes=10, model='logreg', hidden=None,
             theta0=None, history='moved', stale_vhat=(0, 0)):
  """`steps` iterations of LASG-WK1/WK2/PS or CADA1/2 (or an eager worker
  under either server).

  Args:
    trigger: one of LASG_TRIGGERS.
    batches: batches[k][m], worker m's minibatch at step k (None: shards).
    quantized: LAQ's quantizer on the innovation g - Qhat_m (b = `bits`),
      its error terms c_e (e + ehat) in the WK rules' right-hand side.
    server: 'sgd' (theta - alpha sum_m Qhat_m) or 'cada_amsgrad' (AMSGrad
      without bias correction on that sum, vhat from 0, eps outside the
      root).
    xi, c_e, c_0, tbar: the LAG/LAQ right-hand side's weights and the
      forced upload after tbar skips (WK2, PS) / the snapshot every tbar + 1
      steps (WK1); L: PS's weight; c: CADA's absolute threshold per
      history term.
    history: what each round writes in the history: 'moved', ||theta^{k+1}
      - theta^k||^2; 'sgd', ||alpha agg||^2 (CADA's MNIST code,
      utils_gpu.py's update_params_adam).
    stale_vhat: (lo, hi), the 'cada_amsgrad' coordinates whose vhat stays at the
      first step's v (the MNIST code's typo, utils_gpu.py:158; (0, 0): none).

  Returns:
    As `run`, plus grads [T, M] (gradients each worker computed).
  """
  dtype = x_mnd.dtype
  dt = dtype.type
  if trigger not in LASG_TRIGGERS:
    raise ValueError(trigger)
  m_workers, _, dim = x_mnd.shape
  p = num_params(model, dim, classes, hidden)
  theta = (np.zeros(p, dtype) if theta0 is None else
           np.array(theta0, dtype))
  alpha, xi, c_e, c_0, L, c = map(dt, (alpha, xi, c_e, c_0, L, c))
  loss_and_grad = lambda th, x, y: shard_loss_and_grad(th, x, y, dt(lam),
                                                       classes, model, hidden)
  qhat = np.zeros((m_workers, p), dtype)
  ehat = np.zeros(m_workers, dtype)
  clock = np.full(m_workers, np.inf)  # never uploaded: forced at k = 0
  stale = np.tile(theta, (m_workers, 1))  # thetahat_m (WK2, PS), snapshot (WK1)
  dhat = np.zeros((m_workers, p), dtype)  # WK1's deltahat_m
  since = np.zeros(m_workers, int)  # WK1: steps since the snapshot
  mom, vel, vmax = (np.zeros(p, dtype) for _ in range(3))
  agg = np.zeros(p, dtype)
  hist = np.zeros(memory, dtype)
  rows = []
  for k in range(steps):
    row = dict(loss=dt(0), sent=np.zeros(m_workers, bool),
               bits=np.zeros(m_workers, np.int64),
               bits_down=np.full(m_workers, 32 * p, np.int64),
               grads=np.ones(m_workers, np.int64),
               **{n: np.zeros(m_workers, dtype)
                  for n in ('innovation', 'threshold', 'error')})
    rhs_hist = (xi / memory) * np.sum(hist) / (alpha**2 * m_workers**2)
    for m in range(m_workers):
      f_m, g = loss_and_grad(theta, x_mnd[m], y_mn[m])
      row['loss'] += f_m
      xs, ys = x_mnd[m], y_mn[m]
      if batches is not None:
        xs, ys = xs[batches[k][m]], ys[batches[k][m]]
        _, g = loss_and_grad(theta, xs, ys)
      if quantized:
        q, _ = quantize(g, qhat[m], bits)
        cost = bits * p + 32
      else:
        q, cost = g, 32 * p
      e = np.sum((q - g)**2)
      second = lambda th: loss_and_grad(th, xs, ys)[1]  # the same sample
      rhs = rhs_hist + c_e * (e + ehat[m]) + c_0
      if trigger.startswith('cada'):
        rhs = c * np.sum(hist)
      if trigger == 'eager':
        lhs, upload = np.sum((q - qhat[m])**2), True
      elif trigger in ('lasg_wk2', 'cada_wk2'):
        forced = clock[m] >= tbar
        lhs = np.sum((g - second(stale[m]))**2)
        upload = forced or lhs >= rhs
        row['grads'][m] = 1 if forced else 2
        if upload:
          stale[m] = theta
      elif trigger in ('lasg_wk1', 'cada_wk1'):
        since[m] += 1
        refresh = since[m] > tbar
        delta = g - second(stale[m])
        lhs = np.sum((delta - dhat[m])**2)
        upload = refresh or lhs >= rhs or clock[m] == np.inf
        row['grads'][m] = 1 if refresh else 2
        if refresh:
          stale[m], dhat[m], since[m] = theta, 0, 0
        elif upload:
          dhat[m] = delta
      else:  # lasg_ps: the server selects before the worker computes
        rhs = rhs_hist + c_0
        lhs = L * np.sum((theta - stale[m])**2)
        upload = lhs >= rhs or clock[m] >= tbar
        row['grads'][m] = int(upload)
        row['bits_down'][m] = 32 * p if upload else 0  # theta^k, pulled
        if upload:
          stale[m] = theta
      if upload:
        agg += q - qhat[m]
        qhat[m], ehat[m], clock[m] = q, e, 0
        row['sent'][m], row['bits'][m] = True, cost
      else:
        clock[m] += 1
      row['innovation'][m], row['threshold'][m], row['error'][m] = lhs, rhs, e
    if server == 'sgd':
      new_theta = theta - alpha * agg
    else:
      mom = dt(b1) * mom + (1 - dt(b1)) * agg
      vel = dt(b2) * vel + (1 - dt(b2)) * agg**2
      lo, hi = stale_vhat
      keep = vmax[lo:hi].copy()
      vmax = np.maximum(vmax, vel)
      if k > 0:
        vmax[lo:hi] = keep
      new_theta = theta - alpha * mom / (np.sqrt(vmax) + dt(eps))
    entry = (np.sum((alpha * agg)**2) if history == 'sgd'
             else np.sum((new_theta - theta)**2))
    hist = np.concatenate([[entry], hist[:-1]]).astype(dtype)
    theta = new_theta
    rows.append(row)
  out = {n: np.array([r[n] for r in rows])
         for n in ('loss', 'sent', 'bits', 'bits_down', 'grads', 'innovation',
                   'threshold', 'error')}
  out['theta'] = theta
  return out


# ---------------------------------------------------------------------------
# Rounds with local work (/work/shared/local-steps.md): FedAvg, FedProx,
# SCAFFOLD, FedPAQ and the FedOpt servers, round by round.


def _clip(v, c):
  """v min(1, c / ||v||_2) (NaN, +-inf set to 0 first; 0 stays 0)."""
  v = np.where(np.isfinite(v), v, 0).astype(v.dtype)
  norm = np.sqrt(np.sum(v * v))
  return v * (c / norm) if norm > c else v


def run_local(x_mnd, y_mn, *, rounds, theta0, batches, present, local_steps,
              client_lr, mu=0.0, control=False, server='sgd',
              server_lr=1.0, momentum=0.9, b1=0.9, b2=0.99, tau=1e-3,
              weighting='samples', counts=None, compressor='identity',
              levels=16, uniforms=None, lam=0.0, classes=10,
              model='logreg', hidden=None, dp=None, clip=1.0, z=0.0,
              noise=None, rate=None, sampled=0):
  """Rounds of local work, written from the contract's text.

  Each participant m of round k (present[k][m]) starts from theta^k, runs
  K = local_steps steps of SGD with step client_lr on the minibatches
  batches[k][m][j] of its shard, on f_m + mu/2 ||theta - theta^k||^2 (and,
  with `control`, the gradient corrected by c - c_m: SCAFFOLD's option II),
  and uploads Delta_m = theta^k - theta_m^K, compressed by `compressor`
  (identity: 32 P bits; qsgd: QSGD's s = levels quantizer on Delta_m, with
  uniforms[k][m]); with `control` also Delta c_m (32 P bits). The server
  takes the participants' mean, weighted by counts[m] (samples) or not
  (uniform), and steps: sgd (theta - eta_s mean), momentum (b <- beta b +
  mean; theta - eta_s b), fedadam / fedyogi (Reddi et al. 2021, Algorithm
  2: m, v from tau^2, no bias correction); c += sum_S Delta c_m / M.

  Differential privacy (async-dp.md, B.2), `dp`: Delta_m clipped to `clip`
  (flat L2, v min(1, C / ||v||)); 'local': plus z C xi_m before the
  compressor; 'distributed': plus z C / sqrt(sampled) xi_m; 'central': the
  server's step is (sum_S clip(Q_m) + z C xi) / D, D = `sampled` or `rate` M (q M),
  also in a round nobody took part in. xi_m = noise[k][m], N(0, I) draws
  (the tests take laq_jax's documented ones), the server's noise[k][M].

  Returns:
    {'theta': final theta, 'loss': [f(theta^k)] per round (the sum of the
    workers' objectives on their shards), 'bits': [k][m] uplink bits (0 if
    absent), 'uploads': [k][m] the uploads (None if absent), 'clipped':
    how many Delta_m the clip shortened}.
  """
  theta = np.array(theta0, dtype=x_mnd.dtype)
  dtype = theta.dtype.type
  num_workers, num_params = len(x_mnd), theta.size
  counts = np.full(num_workers, x_mnd.shape[1]) if counts is None else counts
  c_server = np.zeros_like(theta)
  c_worker = np.zeros((num_workers, num_params), theta.dtype)
  mom = np.zeros_like(theta)
  adam_m = np.zeros_like(theta)
  adam_v = np.full_like(theta, tau ** 2)
  out = {'loss': [], 'bits': [], 'uploads': [], 'clipped': 0}
  for k in range(rounds):
    out['loss'].append(objective(theta, x_mnd, y_mn, lam, classes, model,
                                 hidden)[0])
    uploads, bits, dcs = [None] * num_workers, [0] * num_workers, {}
    for m in range(num_workers):
      if not present[k][m]:
        continue
      th = theta.copy()
      for j in range(local_steps):
        idx = batches[k][m][j]
        _, g = shard_loss_and_grad(th, x_mnd[m][idx], y_mn[m][idx], lam,
                                   classes, model, hidden)
        g = g + dtype(mu) * (th - theta)
        if control:
          g = g + (c_server - c_worker[m])
        th = th - dtype(client_lr) * g
      delta = theta - th
      if dp is not None:
        out['clipped'] += int(np.sqrt(np.sum(delta * delta)) > clip)
        delta = _clip(delta, dtype(clip))
        std = {'local': dtype(z) * dtype(clip),
               'distributed': dtype(z) * dtype(clip) / np.sqrt(
                   dtype(max(sampled, 1)))}.get(dp)
        if std is not None:
          delta = delta + std * noise[k][m]
      if compressor == 'qsgd':
        q, b = qsgd(delta, levels, uniforms[k][m])
      else:
        q, b = delta, 32 * num_params
      if control:
        new_c = c_worker[m] - c_server + delta / (dtype(local_steps)
                                                 * dtype(client_lr))
        dcs[m] = new_c - c_worker[m]
        c_worker[m] = new_c
        b += 32 * num_params
      uploads[m], bits[m] = q, b
    chosen = [m for m in range(num_workers) if present[k][m]]
    if dp == 'central':
      total = sum((_clip(uploads[m], dtype(clip)) for m in chosen),
                  np.zeros_like(theta))
      xi = (dtype(z) * dtype(clip)) * noise[k][num_workers]
      denominator = dtype(sampled) if sampled else dtype(rate) * num_workers
      theta = theta - dtype(server_lr) * ((total + xi) / denominator)
    elif chosen:
      w = np.array([counts[m] if weighting == 'samples' else 1.0
                    for m in chosen], theta.dtype)
      mean = sum(wi * uploads[m] for wi, m in zip(w, chosen)) / w.sum()
      if server == 'sgd':
        theta = theta - dtype(server_lr) * mean
      elif server == 'momentum':
        mom = dtype(momentum) * mom + mean
        theta = theta - dtype(server_lr) * mom
      else:
        adam_m = dtype(b1) * adam_m + dtype(1 - b1) * mean
        sq = mean * mean
        if server == 'fedyogi':
          adam_v = adam_v - dtype(1 - b2) * sq * np.sign(adam_v - sq)
        else:
          adam_v = dtype(b2) * adam_v + dtype(1 - b2) * sq
        theta = theta - dtype(server_lr) * adam_m / (np.sqrt(adam_v)
                                                     + dtype(tau))
    if dcs:
      c_server = c_server + sum(dcs.values()) / dtype(num_workers)
    out['bits'].append(bits)
    out['uploads'].append(uploads)
  out['theta'] = theta
  return out


def fednova_norm(tau, client_lr, mu=0.0, rho=0.0):
  """||a_m||_1 of FedNova (Wang et al. 2020, Section 4), the paper's closed
  forms: tau (client SGD); sum_{j=1..tau} (1 - rho^j) / (1 - rho) (local
  momentum rho); (1 - (1 - eta mu)^tau) / (eta mu) (the proximal term)."""
  if rho:
    return sum((1 - rho ** j) / (1 - rho) for j in range(1, tau + 1))
  if mu:
    eta_mu = client_lr * mu
    return (1 - (1 - eta_mu) ** tau) / eta_mu
  return float(tau)


def run_fednova(x_mnd, y_mn, *, rounds, theta0, batches, present, taus,
                client_lr, mu=0.0, rho=0.0, normalize=True, server_lr=1.0,
                weighting='uniform', counts=None, lam=0.0, classes=10):
  """FedNova's rounds from the contract's text (after-laq.md section 7).

  Participant m of round k runs taus[k][m] steps of client SGD (heavy-ball
  rho, reset each round: b <- g + rho b, y <- y - eta b; the gradient of f_m
  + mu/2 ||y - theta^k||^2) on the minibatches batches[k][m][j] and
  uploads d_m = Delta_m / ||a_m||_1 (`fednova_norm`; Delta_m itself when
  not `normalize`), 32 P + 32 bits. The server: w_m = counts[m] (samples)
  or 1 over the participants, tau_eff = sum w_m ||a_m||_1 / sum w_m,
  theta <- theta - eta_s tau_eff sum w_m d_m / sum w_m (without
  `normalize`: FedAvg's weighted mean of Delta_m).

  Returns:
    {'theta', 'loss': [f(theta^k)], 'bits': [k][m]}.
  """
  theta = np.array(theta0, dtype=x_mnd.dtype)
  dtype = theta.dtype.type
  num_workers, num_params = len(x_mnd), theta.size
  counts = np.full(num_workers, x_mnd.shape[1]) if counts is None else counts
  out = {'loss': [], 'bits': []}
  for k in range(rounds):
    out['loss'].append(objective(theta, x_mnd, y_mn, lam, classes)[0])
    uploads, norms, bits = {}, {}, [0] * num_workers
    for m in range(num_workers):
      if not present[k][m]:
        continue
      y, buf = theta.copy(), np.zeros_like(theta)
      for j in range(taus[k][m]):
        idx = batches[k][m][j]
        _, g = shard_loss_and_grad(y, x_mnd[m][idx], y_mn[m][idx], lam,
                                   classes)
        g = g + dtype(mu) * (y - theta)
        buf = g + dtype(rho) * buf
        y = y - dtype(client_lr) * buf
      a = fednova_norm(taus[k][m], client_lr, mu, rho) if normalize else 1.0
      uploads[m], norms[m] = (theta - y) / dtype(a), a
      bits[m] = 32 * num_params + (32 if normalize else 0)
    if uploads:
      w = {m: float(counts[m]) if weighting == 'samples' else 1.0
           for m in uploads}
      total = sum(w.values())
      mean = sum(dtype(w[m]) * uploads[m] for m in uploads) / dtype(total)
      tau_eff = sum(w[m] * norms[m] for m in uploads) / total
      theta = theta - dtype(server_lr) * dtype(tau_eff) * mean
    out['bits'].append(bits)
  out['theta'] = theta
  return out



def scaffnew_steps(u, p, k_cap=0, max_steps=10_000):
  """K_k = 1 + floor(ln U / ln(1 - p)) (after-laq.md section 5) with
  U = 1 - u (section 0), u the round's shared uniform in [0, 1), at most
  k_cap (> 0) and max_steps."""
  k = 1 + np.floor(np.log(1.0 - float(u)) / np.log1p(-p)) if p < 1 else 1
  if k_cap > 0:
    k = min(k, k_cap)
  return int(min(max(k, 1), max_steps))


def run_scaffnew(x_mnd, y_mn, *, rounds, theta0, coins, p, gamma, lam=0.0,
                 k_cap=0, classes=10):
  """Scaffnew's rounds from the contract's text (after-laq.md section 5):
  every client from y = theta^k runs K_k (`scaffnew_steps` of coins[k])
  steps y <- y - gamma (grad f_m(y) - h_m) on its whole shard; the server
  takes the uniform mean of the y_m; then h_m <- h_m + (p / gamma)
  (theta^{k+1} - y_m). Asserts sum_m h_m = 0 (to 1e-9 of sum ||h_m||).

  Returns:
    {'theta', 'h' [M, P], 'loss': [f(theta^k)], 'steps': [K_k]}.
  """
  theta = np.array(theta0, dtype=x_mnd.dtype)
  dtype = theta.dtype.type
  num_workers = len(x_mnd)
  h = np.zeros((num_workers, theta.size), theta.dtype)
  out = {'loss': [], 'steps': []}
  for k in range(rounds):
    out['loss'].append(objective(theta, x_mnd, y_mn, lam, classes)[0])
    steps = scaffnew_steps(coins[k], p, k_cap)
    out['steps'].append(steps)
    ys = []
    for m in range(num_workers):
      y = theta.copy()
      for _ in range(steps):
        _, g = shard_loss_and_grad(y, x_mnd[m], y_mn[m], lam, classes)
        y = y - dtype(gamma) * (g - h[m])
      ys.append(y)
    theta = sum(ys) / dtype(num_workers)
    for m in range(num_workers):
      h[m] = h[m] + dtype(p) / dtype(gamma) * (theta - ys[m])
    total = np.abs(h.sum(axis=0)).max()
    assert total <= 1e-9 * max(np.linalg.norm(h, axis=1).sum(), 1e-300), total
  out['theta'], out['h'] = theta, h
  return out


def run_feddyn(x_mnd, y_mn, *, rounds, theta0, batches, present, steps,
               client_lr, alpha, server_lr=1.0, lam=0.0, classes=10):
  """FedDyn's rounds from the contract's text (after-laq.md section 6, the
  authors' code's form): participant m from y = theta^k runs `steps` of
  SGD on the minibatches batches[k][m][j] with the gradient grad f_m(y) +
  alpha (nu_m + y - theta^k), uploads Delta_m = theta^k - y (32 P), and
  sets nu_m <- nu_m - Delta_m; the server N <- N - sum_S Delta_m,
  theta^{k+1} = theta^k - eta_s mean_S Delta_m + N / M (nobody: theta
  stays). Asserts N = sum_m nu_m every round.

  Returns:
    {'theta', 'nu' [M, P], 'n' [P], 'loss': [f(theta^k)], 'bits': [k][m]}.
  """
  theta = np.array(theta0, dtype=x_mnd.dtype)
  dtype = theta.dtype.type
  num_workers = len(x_mnd)
  nu = np.zeros((num_workers, theta.size), theta.dtype)
  n_server = np.zeros(theta.size, theta.dtype)
  out = {'loss': [], 'bits': []}
  for k in range(rounds):
    out['loss'].append(objective(theta, x_mnd, y_mn, lam, classes)[0])
    deltas, bits = {}, [0] * num_workers
    for m in range(num_workers):
      if not present[k][m]:
        continue
      y = theta.copy()
      for j in range(steps):
        idx = batches[k][m][j]
        _, g = shard_loss_and_grad(y, x_mnd[m][idx], y_mn[m][idx], lam,
                                   classes)
        y = y - dtype(client_lr) * (g + dtype(alpha) * (nu[m] + y - theta))
      deltas[m] = theta - y
      nu[m] = nu[m] - deltas[m]
      bits[m] = 32 * theta.size
    if deltas:
      total = sum(deltas.values())
      n_server = n_server - total
      theta = (theta - dtype(server_lr) * total / dtype(len(deltas))
               + n_server / dtype(num_workers))
    np.testing.assert_allclose(n_server, nu.sum(axis=0), rtol=1e-9,
                               atol=1e-12)
    out['bits'].append(bits)
  out['theta'], out['nu'], out['n'] = theta, nu, n_server
  return out
