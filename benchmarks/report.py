"""The benchmark's printed table and its headline keys."""

from __future__ import annotations

import json

from benchmarks.workloads import NUM_WORKERS

HEADLINE_KEYS = (
    'logreg_floor_fraction', 'logreg_floor_fraction_float64',
    'logreg_floor_fraction_before', 'logreg_floor_fraction_float64_before',
    'logreg_floor_fraction_paper_grid',
    'logreg_floor_fraction_float64_paper_grid',
    'logreg_floor_fraction_paper_grid_vmap',
    'logreg_floor_fraction_float64_paper_grid_vmap',
    'laq_over_gd_logreg', 'laq_over_gd_mlp', 'laq_over_plain_gd_logreg',
    'laq_over_plain_gd_mlp', 'jax_over_numpy', 'jax_over_numpy_float32',
    'jax_over_numpy_float64', 'sweep_speedup', 'sweep_speedup_vmap', 'matmul_fraction',
    'matmul_fraction_logreg', 'bandwidth_fraction_logreg', 'self_check_ok')


def _ms(s):
  return f'{s * 1e3:9.2f} ms'


def _g(v, unit=''):
  return f'{v / 1e9:9.2f} G{unit}'


def _spread(r, key):
  return f"[{r['ratios'][key]['min']:.2f}..{r['ratios'][key]['max']:.2f}]"


def print_table(res: dict) -> None:
  """Prints the table of `run.main`'s result (docs/benchmarks.md has one)."""
  m = res['machine']
  lines = [
      f"machine: {m['cpu_model']}, {m['cpus_usable']} usable CPUs, "
      f"{(m['mem_total_bytes'] or 0) / 2**30:.1f} GiB RAM, backend "
      f"{m['backend']} {m['devices']}, jax {m['jax']}, "
      f"load avg start {m['load_average_start'][0]:.2f} "
      f"end {m['load_average_end'][0]:.2f}",
      '',
      f"{'measure':<46}{'value':>16}",
      '-' * 62,
      f"{res['matmul']['probe']:<46}"
      f"{_g(res['matmul']['rate'], 'FLOP/s'):>16}",
      f"{'read bandwidth, ' + res['bandwidth']['probe']:<46}"
      f"{_g(res['bandwidth']['rate'], 'B/s'):>16}",
  ]
  for dtype, r in res['logreg_floor'].items():
    p = r['per_iter_s']
    lines += [
        '',
        f"[logreg against its floor: {dtype}, N={r['num_samples']}, "
        f"M={NUM_WORKERS}, features as {r['feature_layout']}]",
        f"{'  dense matmul FLOP/s (interleaved)':<46}"
        f"{_g(r['matmul_flops_per_s'], 'FLOP/s'):>16}",
        f"{'  read bandwidth (interleaved)':<46}"
        f"{_g(r['read_bytes_per_s'], 'B/s'):>16}",
        f"{'  floor (' + r['floor_bound'] + ')':<46}{_ms(r['floor_s']):>16}",
        f"{'  laq per iteration, fast gradient':<46}{_ms(p['laq']):>16}",
        f"{'  laq per iteration, autodiff (before)':<46}"
        f"{_ms(p['laq_autodiff']):>16}",
        f"{'  gradient + step alone, fast':<46}{_ms(p['gradient']):>16}",
        f"{'  gradient + step alone, autodiff':<46}"
        f"{_ms(p['gradient_autodiff']):>16}",
        f"{'  fraction of floor (laq iteration)':<46}"
        f"{r['floor_fraction']:>16.3f}",
        f"{'  fraction of floor before':<46}"
        f"{r['floor_fraction_before']:>16.3f}",
        f"{'  paper program (4 points mapped) per iter.':<46}"
        f"{_ms(p['paper_grid']):>16}",
        f"{'  its floor (4 gradients, 4 passes)':<46}"
        f"{_ms(r['floor_s_paper_grid']):>16}",
        f"{'  fraction of floor (paper program)':<46}"
        f"{r['floor_fraction_paper_grid']:>16.3f}",
        f"{'  paper program (4 points vmapped) per iter.':<46}"
        f"{_ms(p['paper_grid_vmap']):>16}",
        f"{'  its floor (4 gradients, one pass)':<46}"
        f"{_ms(r['floor_s_paper_grid_vmap']):>16}",
        f"{'  fraction of floor (vmapped program)':<46}"
        f"{r['floor_fraction_paper_grid_vmap']:>16.3f}",
        f"{'  speedup (paired median)':<46}{r['speedup']:>14.2f} x",
    ]
  for name in ('logreg', 'mlp'):
    r = res['laq_vs_gd'][name]
    p = r['per_iter_s']
    lines += [
        '',
        f"[{name}: P={r['num_params']}, N={r['num_samples']}, M={NUM_WORKERS}, "
        f"float32, T={r['num_steps']}, compile {r['compile_s']:.1f} s]",
        f"{'  laq  per iteration (run_chunk)':<46}{_ms(p['laq']):>16}",
        f"{'  gd   per iteration (run_chunk, same program)':<46}"
        f"{_ms(p['gd']):>16}",
        f"{'  plain GD scan, no rule (written here)':<46}"
        f"{_ms(p['plain_gd']):>16}",
        f"{'  rule step alone (fixed gradients)':<46}"
        f"{_ms(p['rule_only']):>16}",
        f"{'  GD on one batch, no worker axis':<46}"
        f"{_ms(p['unsharded_gd']):>16}",
        f"{'  laq / gd, median of paired ' + _spread(r, 'laq/gd'):<46}"
        f"{r['laq_over_gd']:>14.3f} x",
        f"{'  laq / plain GD ' + _spread(r, 'laq/plain_gd'):<46}"
        f"{r['laq_over_plain_gd']:>14.3f} x",
        f"{'  rule / laq iteration':<46}{r['rule_fraction']:>14.3f}",
        f"{'  gradient matmul FLOP/s (laq)':<46}"
        f"{_g(r['flops_per_s_laq'], 'FLOP/s'):>16}",
        f"{'  dense matmul FLOP/s (interleaved)':<46}"
        f"{_g(r['matmul_flops_per_s'], 'FLOP/s'):>16}",
        f"{'  fraction of matmul FLOP/s':<46}{r['matmul_fraction']:>16.3f}",
        f"{'  X read bytes/s (2 passes, laq)':<46}"
        f"{_g(r['bytes_per_s_laq'], 'B/s'):>16}",
        f"{'  read bandwidth (interleaved)':<46}"
        f"{_g(r['read_bytes_per_s'], 'B/s'):>16}",
        f"{'  fraction of read bandwidth':<46}{r['bandwidth_fraction']:>16.3f}",
    ]
  if 'loss_every' in res:
    r = res['loss_every']
    p = r['per_iter_s']
    lines += [
        '',
        f"[minibatch network: slaq, batch {r['batch_size']}, "
        f"N={r['num_samples']}, M={NUM_WORKERS}, float32, "
        f"T={r['num_steps']}]",
        f"{'  full objective every iteration':<46}"
        f"{_ms(p['loss_every_1']):>16}",
        f"{'  full objective every 10 (loss_every=10)':<46}"
        f"{_ms(p['loss_every_10']):>16}",
        f"{'  no full objective (the minibatch step)':<46}"
        f"{_ms(p['no_loss']):>16}",
        f"{'  every 1 / every 10 ' + _spread(r, 'every_1_over_every_10'):<46}"
        f"{r['ratios']['every_1_over_every_10']['median']:>14.2f} x",
        f"{'  every 10 / none ' + _spread(r, 'every_10_over_no_loss'):<46}"
        f"{r['ratios']['every_10_over_no_loss']['median']:>14.2f} x",
    ]
  lines += ['', f"[laq-jax vs NumPy reference, logreg laq, "
                f"N={res['laq_vs_gd']['logreg']['num_samples']}]"]
  for dtype, r in res['jax_vs_numpy'].items():
    lines += [
        f"{'  ' + dtype + ' laq-jax per iteration':<46}"
        f"{_ms(r['jax_per_iter_s']):>16}",
        f"{'  ' + dtype + ' NumPy per iteration':<46}"
        f"{_ms(r['numpy_per_iter_s']):>16}",
        f"{'  ' + dtype + ' laq-jax / NumPy':<46}{r['jax_over_numpy']:>14.3f} x",
    ]
  for key in ('sweep', 'sweep_vmap'):
    if key not in res:
      continue
    s = res[key]
    lines += ['', f"[sweep: {s['problem']} laq, points "
                  f"{s.get('grid_axis', 'vmap')}ped, T={s['num_steps']}, "
                  f"one-point program "
                  f"{_ms(s['single_per_iter_s']).strip()}/iter]",
              f"{'  G':<6}{'sweep':>12}{'separate':>12}{'speedup':>10}"
              f"{'vs G=1':>8}{'ms/pt/it':>10}{'compile':>9}{'XLA MiB':>9}"]
    for r in s['rows']:
      mem = r['memory'].get('total')
      lines.append(
          f"  {r['G']:<4}{r['sweep_s']:>11.3f}s{r['separate_s']:>11.3f}s"
          f"{r['sweep_speedup']:>9.2f}x{r['sweep_over_G1']:>7.2f}x"
          f"{r['sweep_per_point_iter_s'] * 1e3:>10.2f}"
          f"{r['compile_s']:>8.1f}s{(mem or 0) / 2**20:>9.1f}")
  for name, r in res['largest_grid'].items():
    lines.append(f"{'  largest G that fits, ' + name:<46}"
                 f"{str(r.get('largest_G')):>16}")
  lines += ['', '[self-check: NumPy reference vs laq-jax]']
  for r in res['self_check']:
    lines.append(
        f"  {r['problem']:<7}{r['algo']:<5}{r['dtype']:<8}"
        f"uploads {r['uploads_jax']:>4}/{r['uploads_numpy']:<4}"
        f"mismatches {r['sent_mismatches']:<3}"
        f"loss rel {r['loss_max_rel_diff']:.1e}  "
        f"{'ok' if r['ok'] else ('MISMATCH' if r['strict'] else 'differs')}")
  lines += ['', 'headline: ' + json.dumps(
      {k: res[k] for k in HEADLINE_KEYS}, default=float)]
  print('\n'.join(lines))

