"""Default configuration: every field a run reads, with the LAQ paper's values.

The other configs import this one and change a few fields. Any field can be
overridden on the command line (`--config.bits=3`) or through the config
argument (`--config=configs/mnist_logreg.py:algo=lag,bits=3,quick`).

    python -m experiments.main --config=configs/default.py --workdir=runs/default
"""

from __future__ import annotations

import ast

import ml_collections

from laq_jax import hyper as hyper_lib
from laq_jax import parts as parts_lib
from laq_jax import show

# Shrunken settings for `:quick` (a few minutes on a 2-core CPU) and `:tiny`
# (seconds; what the tests use).
VARIANTS = {
    'quick': dict(num_iters=300, eval_every=50),
    'tiny': dict(train_subset=600, num_iters=30, eval_every=10),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The defaults: LAQ on full MNIST logistic regression (Sun et al. 2019)."""
  config = ml_collections.ConfigDict()
  # Algorithm (laq_jax.ALGORITHMS): the paper's gd, qgd, lag, laq, sgd,
  # sqgd, slag, slaq, qsgd, ssgd; the field's terngrad, ef_signsgd, topk_ef,
  # ef21, ef21_sgd, clag, two_laq (docs/algorithm.md); or one with other
  # parts in its slots: 'laq+server=adam' (hyper.compose).
  config.algo = 'laq'
  # Other parts in the preset's slots ('': the preset's own), as the name
  # 'laq+server=adam' would put them (laq_jax.hyper.compose):
  # --config.compressor=top_k --config.server=fedadam.
  config.compressor = ''
  config.trigger = ''
  config.server = ''
  config.client = ''
  config.estimator = ''  # direct (compress g) or innovation (g - Qhat)
  config.broadcast = ''  # full (theta) or quantized (two_laq's)
  config.compressor_b = ''  # a second compressor an estimator may call
  # differential privacy (laq_jax.privatizers): dp_central, dp_distributed,
  # dp_local; its clip and noise_multiplier in config.params.dp_central, ...
  config.privacy = ''
  config.num_workers = 10  # M
  config.num_iters = 4000  # iterations T
  # Every numeric hyperparameter, with its default and doc, from the one
  # table `laq_jax.hyper.FIELDS` (`python -c "import laq_jax;
  # print(laq_jax.hyper.describe())"` lists them): step_size (alpha, on the
  # *sum* of the M worker gradients), bits (b), xi, xi_schedule (xi's
  # multipliers by iteration, 'K1:C1,K2:C2'; the authors' minibatch network:
  # '300:2,500:6'), err_weight (c_e), threshold_offset (c_0), max_staleness
  # (tbar), l2 (lam, per worker), seed, downlink_bits (two_laq's broadcast,
  # 0: b).
  # Then the group `network`, the modeled network the rounds are timed on
  # (laq_jax.network, docs/algorithm.md): network.profile (datacenter,
  # cross_silo, mobile) and overrides of its fields, None for the profile's:
  # network.up_bps, network.down_bps, network.up_latency_s,
  # network.down_latency_s, network.flops_per_s, network.straggler (none,
  # exp, lognormal), network.straggler_scale, network.server_in_bps,
  # network.server_out_bps, network.topology (star; ring for gd, sgd).
  for field in hyper_lib.CONFIG_FIELDS:
    value = (field.default if field.default is not None else
             ml_collections.config_dict.placeholder(field.value_type))
    group, _, name = field.name.rpartition('.')
    if group:  # a nested group: config.network.up_bps
      if group not in config:
        config[group] = ml_collections.ConfigDict()
      config[group][name] = value
    else:
      config[name] = value
  # The parts' own parameters (laq_jax.parts), one group per part that
  # declares some, at their defaults: `--config.params.qsgd.levels=256`
  # (QSGD's s), params.rand_p.keep_prob (SSGD's p), params.top_k.k (a
  # fraction of p or a count), params.clag.zeta, params.momentum.momentum, ...
  # A value that differs from the default overrides the preset's; a group of
  # a part the run does not use must stay at its defaults.
  config.params = ml_collections.ConfigDict(parts_lib.default_groups())
  # Modules to import before anything is checked, comma-separated: a user's
  # parts and presets, registered on import ('my_parts,lab.compressors').
  config.modules = ''
  config.memory = 10  # D, parameter steps the trigger remembers
  config.batch_size = 500  # samples per worker per step (stochastic algos)
  # The authors' scripts where they depart from Algorithm 1: no forced upload
  # at k = 0, history weights xi / k for k <= D, b*p bits per quantized
  # upload (no radius); in minibatch runs their minibatch scripts' history
  # window, contiguous-block minibatches, QSGD's rounding and bit count and
  # SSGD without seed bits (docs/algorithm.md). Off: the paper's Algorithm 1.
  config.authors_code = False
  # Data.
  # 'mnist', 'fashion_mnist', 'cifar10', 'shakespeare[:OPTIONS]',
  # 'builtin:heart_scale', 'libsvm:/path'
  config.dataset = 'mnist'
  # the data's folder (MNIST, Fashion-MNIST, CIFAR-10); '' looks in the
  # kind's environment variable ($LAQ_JAX_DATA for MNIST) and the cache
  config.data_dir = ''
  # contiguous (paper), iid, label_sorted, dirichlet, shards (McMahan et
  # al.'s two label shards per client) (equal sizes), dirichlet_unequal
  # (Dirichlet sizes too; padded and masked), or natural (the data's own
  # clients, e.g. Shakespeare's roles)
  config.split = 'contiguous'
  config.dirichlet_alpha = 0.5  # label skew of dirichlet / dirichlet_unequal
  config.dirichlet_size_alpha = 1.0  # size skew of dirichlet_unequal
  config.data_seed = 0  # shuffles the iid, dirichlet and shards splits
  config.train_subset = 0  # 0: all training samples; N: the first N
  # Model and numerics.
  # The model (laq_jax.problems.REGISTRY): logreg, mlp, cnn, lasg_cnn,
  # resnet20, char_lstm, pfl_cnn; binary, binary_nonconvex, binary_sigmoid,
  # binary_sigmoid_nonconvex (MNIST parity); autoencoder.
  config.model = 'logreg'
  config.hidden = 200  # hidden units of the mlp
  # Initial parameters of the mlp's and the CNNs' layers: 'default' (flax's)
  # or 'torch' (PyTorch's torch.nn defaults, as PyTorch code starts).
  config.init = 'default'
  # How char_lstm runs its layers over time (laq_jax.models.LSTM_IMPLS):
  # 'flax' (nn.RNN, autodiff) or 'fused' (models.lstm_layer: the same
  # parameters and function, fewer kernels a step; not the same bits).
  config.lstm = 'flax'
  config.precision = 'float64'  # 'float32' or 'float64'
  # Evaluation and outputs.
  config.eval_every = 100  # chunk length: progress line + test accuracy
  # Log the full objective f(theta^k) every N iterations (k % N == 0; empty
  # elsewhere in metrics.csv). 0: 1 for full-batch runs (it comes with the
  # gradient), 10 for minibatch runs (a pass over all the data per log);
  # at least ceil(M / S) where a round computes S of M clients alone.
  config.loss_every = 0
  config.target_residual = 1e-6  # report iterations/uploads/bits to reach it
  config.fstar = 'auto'  # 'auto' (solve, convex models), 'none', or a number
  # Execution.
  config.workers_on = 'vmap'  # 'vmap' (one device) or 'devices' (shard_map)
  config.checkpoint_every = 0  # save state every N iterations (0 = off)
  # Clients whose gradients or local steps are computed at once: 0 all
  # (vmapped); b > 0 in batches of b (less memory; on a CPU faster for the
  # CNNs). The same results to rounding.
  config.client_batch = 0
  return apply_arg(config, arg)


def add_sweep_fields(config: ml_collections.ConfigDict, grid: dict, *,
                     batch_size: int = 0, algo_settings: dict | None = None
                     ) -> ml_collections.ConfigDict:
  """Makes `config` a sweep config: its grid and every sweep field, the
  optional ones at their defaults, so that each can be set on the command
  line (`--config.sweep_grid_axis=vmap`,
  `--config.algo_settings="{'slaq': {'step_size': 0.01}}"`).

  Fields (experiments.run.config.SWEEP_FIELDS + OPTIONAL_SWEEP_FIELDS):
    sweep: {key: [values]}, the grid (keys from laq_jax.sweep.GRID_KEYS).
    sweep_batch_size: grid points per compiled call (0: all at once).
    sweep_grid_axis: 'auto', 'map' or 'vmap' (laq_jax.RunSpec.grid_axis).
    algo_settings: {algo: {key: value}}, values that replace the config's
      for that algorithm's points ({}: none).
  """
  config.sweep = ml_collections.ConfigDict(grid)
  config.sweep_batch_size = batch_size
  config.sweep_grid_axis = 'auto'
  config.algo_settings = ml_collections.ConfigDict(algo_settings or {})
  return config


def _parse_value(name: str, text: str, current, kind: type | None = None):
  """`text` as the type of the field's current value (or `kind`, the
  declared type of a field that holds None)."""
  if current is None and kind is not None:
    if text.lower() in ('', 'none'):
      return None
    current = kind()
  if isinstance(current, (tuple, ml_collections.ConfigDict)):
    try:  # a literal: 'sweep={"bits": (2, 4)}' (no commas in the :ARG form)
      value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
      value = None
    kind = tuple if isinstance(current, tuple) else dict
    if not isinstance(value, kind):
      raise ValueError(f'config argument {name}={text!r}: expected a '
                       f'{kind.__name__} literal')
    return value if kind is tuple else ml_collections.ConfigDict(value)
  if isinstance(current, bool):
    if text.lower() in ('1', 'true', 'yes'):
      return True
    if text.lower() in ('0', 'false', 'no'):
      return False
    raise ValueError(f'config argument {name}={text!r}: expected true/false')
  kinds = ((int, 'an integer'), (float, 'a number'))
  for kind, description in kinds:
    if isinstance(current, kind):
      try:
        return kind(float(text)) if kind is int and float(text).is_integer() \
            else kind(text)
      except ValueError:
        raise ValueError(f'config argument {name}={text!r}: expected '
                         f'{description}') from None
  return text


def _declared_type(config, name: str) -> type | None:
  """The type a ConfigDict field was declared with (a placeholder's)."""
  try:
    return config.get_ref(name).get_type()
  except (AttributeError, KeyError, TypeError):
    return None


def apply_arg(config: ml_collections.ConfigDict, arg: str | None,
              variants: dict[str, dict] | None = None
              ) -> ml_collections.ConfigDict:
  """Applies a big_vision style argument: 'algo=lag,bits=3,quick'.

  Items are comma-separated; `name=value` sets a field (parsed as the field's
  type; `network.up_bps=5e6` a nested group's), a bare word picks a variant
  from VARIANTS. Items apply left to right.

  Args:
    config: the config to change (in place).
    arg: the text after ':' in `--config=path.py:arg`, or None.
    variants: named sets of overrides (default VARIANTS).

  Returns:
    `config`.

  Raises:
    ValueError: an unknown field or variant, or a value of the wrong type.
  """
  variants = VARIANTS if variants is None else variants
  for item in (arg or '').split(','):
    item = item.strip()
    if not item:
      continue
    if '=' in item:
      name, text = (s.strip() for s in item.split('=', 1))
      group, leaf = config, name
      while '.' in leaf:  # a nested group's field: network.up_bps=5e6
        head, leaf = leaf.split('.', 1)
        if head not in group or not isinstance(group[head],
                                               ml_collections.ConfigDict):
          raise ValueError(f'config argument {item!r}: '
                           f'{show.unknown(head, group.keys())}')
        group = group[head]
      if leaf not in group:
        raise ValueError(f'config argument {item!r}: '
                         f'{show.unknown(leaf, group.keys())}')
      group[leaf] = _parse_value(name, text, group[leaf],
                                 _declared_type(group, leaf))
    elif item in variants:
      config.update(variants[item])
    else:
      near = show.closest(item, variants)
      hint = ('did you mean ' + ' or '.join(map(repr, near)) + '? '
              if near else '')
      raise ValueError(f'config argument {item!r}: unknown variant; {hint}'
                       f'allowed: {", ".join(variants)} or FIELD=VALUE')
  return config
