"""laq_jax.deploy: the worker's and the server's halves of a round, run
apart and talking in payloads, are the simulated run (loop.run)."""

import math

from absl.testing import absltest, parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import deploy, estimators, loop, parts, registry, wire
from laq_jax.deploy import client as client_lib
from laq_jax.deploy import common as common_lib
from laq_jax.deploy import server as server_lib
from laq_jax.deploy import uplink
from tests import common

ROUNDS = 20
# A client's own program against the vmapped simulation, within 1e-5: met
# with XLA's default code generator, not its older loop emitters (the two
# round differently, and LAQ's quantizer turns a last bit into a level);
# tests/conftest.py.
XLA_DEFAULT_EMITTERS = True


def built(algo, **overrides):
  from configs import default  # pylint: disable=g-import-not-at-top
  from experiments.run import build  # pylint: disable=g-import-not-at-top
  config = default.get_config()
  config.update(dict(algo=algo, num_workers=3, precision='float32',
                     train_subset=1800, num_iters=ROUNDS, fstar='none',
                     data_dir=common.mnist_dir() or ''))
  config.update(overrides)
  b = build.build(config)
  return b.spec, b.data, b.hyper


def deployed(spec, data, hyper, refuse=(), rounds=ROUNDS):
  """`rounds` rounds through payloads; `refuse`: (round, client) pairs
  whose upload the server refuses."""
  clients = [deploy.Client(spec, data, hyper, m) for m in range(3)]
  server = deploy.Server(spec, hyper)
  sent, bits, sizes = [], [], []
  for k in range(rounds):
    row = []
    for m, client in enumerate(clients):
      up = client.round(server.broadcast(m))
      if (k, m) in refuse:
        server.refuse(m, 'test')
      else:
        server.receive(m, up.sent, up.payload, up.bits)
      row.append(up)
    server.finish_round()
    sent.append([u.sent for u in row])
    bits.append([u.bits for u in row])
    sizes.append([len(u.payload) if u.payload else 0 for u in row])
  return server, clients, np.array(sent), np.array(bits), np.array(sizes)


@absltest.skipUnless(common.mnist_dir(), 'MNIST not found')
class DeployedIsSimulatedTest(parameterized.TestCase):

  @parameterized.parameters(('laq', dict(step_size=0.5)), ('lag', {}),
                            ('fedavg', {}), ('fedpaq', {}),
                            ('tpc_clag', dict(step_size=0.05)))
  def test_same_uploads_bits_and_parameters(self, algo, overrides):
    self.check_same_uploads_bits_and_parameters(algo, overrides)

  def test_local_dp_adds_the_clients_noise_before_packing(self):
    # LAQ after local privatization (post-processing): each client's
    # clipped, noisy candidate is what it quantizes and packs.
    spec, data, hyper = built('laq+privacy=dp_local', step_size=0.5)
    hyper = hyper._replace(params={**hyper.params, 'dp_local': {
        **hyper.params['dp_local'],
        'clip': jnp.asarray(0.5, jnp.float32),
        'noise_multiplier': jnp.asarray(0.01, jnp.float32)}})
    state, trace = loop.run(spec, data, hyper, ROUNDS)
    server, _, sent, bits, _ = deployed(spec, data, hyper)
    np.testing.assert_array_equal(sent, np.asarray(trace.sent_M))
    np.testing.assert_array_equal(bits, np.asarray(trace.bits_M))
    # (float32, one client's program against the vmapped one: the noise
    # gives every always-black pixel's weight a value near 0, where the
    # last bits differ by up to ~6e-7)
    np.testing.assert_allclose(np.asarray(server.theta_P),
                               np.asarray(state.theta_P), rtol=1e-5,
                               atol=2e-6)
    # ... and the noise is there: without it the run is another.
    quiet = hyper._replace(params={**hyper.params, 'dp_local': {
        **hyper.params['dp_local'],
        'noise_multiplier': jnp.asarray(0.0, jnp.float32)}})
    other, _ = loop.run(spec, data, quiet, ROUNDS)
    self.assertGreater(float(jnp.max(jnp.abs(other.theta_P
                                             - state.theta_P))), 1e-4)

  # (issue 54's fast-tier allowance is spent: the slow tier, ~20 s warm;
  # 3PC v4's top_k_b segment ends inside a byte: the bits run end to end)
  @parameterized.parameters(('marina', dict(step_size=0.05)),
                            ('tpc_v2', dict(step_size=0.05)),
                            ('tpc_v4', dict(step_size=0.05)),
                            ('dasha', dict(step_size=0.05)),
                            ('dasha_mvr', dict(step_size=0.05,
                                               batch_size=100)))
  @pytest.mark.slow
  def test_segmented_uploads_are_the_simulated_ones(self, algo, overrides):
    self.check_same_uploads_bits_and_parameters(algo, overrides)

  def check_same_uploads_bits_and_parameters(self, algo, overrides):
    spec, data, hyper = built(algo, **overrides)
    state, trace = loop.run(spec, data, hyper, ROUNDS)
    server, _, sent, bits, sizes = deployed(spec, data, hyper)
    np.testing.assert_array_equal(sent, np.asarray(trace.sent_M))
    np.testing.assert_array_equal(bits, np.asarray(trace.bits_M))
    self.assertGreater(sent.sum(), 3)  # not only the first round's
    if algo == 'marina':  # both kinds of round after the warm start's
      p = spec.problem.num_params()
      self.assertIn(32 * p, set(bits[1:, 0]))
      self.assertGreater(len(set(bits[1:, 0])), 1)
    self.assertTrue(np.all(sizes == [[math.ceil(b / 8) for b in r]
                                     for r in bits]))
    np.testing.assert_allclose(np.asarray(server.theta_P),
                               np.asarray(state.theta_P), rtol=1e-5,
                               atol=1e-7)

  def test_a_refused_upload_leaves_no_trace(self):
    spec, data, hyper = built('laq', step_size=0.5)
    server, clients, sent, _, _ = deployed(spec, data, hyper,
                                           refuse={(0, 2), (5, 1)})
    self.assertTrue(sent[0, 2])  # it was sent, and refused
    # the aggregate is every client's last upload as the server holds it...
    np.testing.assert_allclose(
        np.asarray(server.state.aggregate_P),
        np.asarray(server.state.last_upload_MxP).sum(0), rtol=1e-5,
        atol=1e-6)
    # ...and each client, told of a refusal, rolled back: worker and server
    # hold the same last upload
    for m, client in enumerate(clients):
      np.testing.assert_array_equal(np.asarray(client.memory.last_upload_P),
                                    np.asarray(server.state.last_upload_MxP[m]))
    self.assertEqual([(r.step, r.worker) for r in server.refusals],
                     [(0, 2), (5, 1)])

  @pytest.mark.slow  # (~3 s warm)
  def test_ef21_bc_downlink_payloads_are_the_simulated_broadcast(self):
    # The server sends top_k_down(agg - G) (the warm start's round: G in
    # full), not theta: each client steps its own theta from the payloads,
    # one refused client included (it applied the broadcast all the same).
    spec, data, hyper = built('ef21_bc', step_size=0.05)
    state, trace = loop.run(spec, data, hyper, ROUNDS)
    server, clients, sent, bits, _ = deployed(spec, data, hyper)
    np.testing.assert_array_equal(bits, np.asarray(trace.bits_M))
    np.testing.assert_array_equal(
        np.asarray(trace.bits_down_M), np.repeat(
            np.asarray(server.bits_down)[:, None], 3, 1))
    p = spec.problem.num_params()
    self.assertEqual(server.bits_down[0], 32 * p)
    self.assertLess(server.bits_down[1], 32 * p // 10)
    message = server.broadcast(0)
    self.assertIsNone(message.theta_P)
    self.assertEqual([len(b) for _, b in message.downlinks],
                     [math.ceil(server.bits_down[-1] / 8)])
    np.testing.assert_allclose(np.asarray(server.theta_P),
                               np.asarray(state.theta_P), rtol=1e-5,
                               atol=1e-7)
    for m, client in enumerate(clients):  # theta^K from the last payload
      np.testing.assert_allclose(
          np.asarray(client.apply_downlinks(server.broadcast(m))),
          np.asarray(server.theta_P), rtol=1e-5, atol=1e-7)
    # Client 1 refused in rounds 3..5: it applied those rounds' payloads
    # (its theta is the others'); the server keeps the payloads from its
    # last taken round on, 2.
    refused, others, _, _, _ = deployed(
        spec, data, hyper, refuse={(3, 1), (4, 1), (5, 1)}, rounds=6)
    self.assertEqual(sorted(refused.downlinks), [2, 3, 4, 5])
    self.assertEqual([j for j, _ in refused.broadcast(1).downlinks],
                     [2, 3, 4, 5])
    np.testing.assert_array_equal(np.asarray(others[1].held.theta_P),
                                  np.asarray(others[0].held.theta_P))
    # a client that lost what it holds cannot step theta: said by name
    lost = deploy.Client(spec, data, hyper, 1)
    with self.assertRaisesRegex(ValueError, r'holds theta\^0: the '
                                "message's payloads start at round 2"):
      lost.round(refused.broadcast(1)._replace(last_taken=None))

  def test_a_segmented_payload_is_checked_whole(self):
    # 3PC v2's upload: Rand-K's segment (its mask keyed by round and client)
    # then top-k's against b. Another client's payload, one cut short or
    # padded, or declared with other bits: refused, nothing taken.
    spec, data, hyper = built('tpc_v2', step_size=0.05)
    clients = [deploy.Client(spec, data, hyper, m) for m in range(3)]
    server = deploy.Server(spec, hyper)
    for m, client in enumerate(clients):  # the warm start's round
      up = client.round(server.broadcast(m))
      server.receive(m, up.sent, up.payload, up.bits)
    server.finish_round()
    ups = [c.round(server.broadcast(m)) for m, c in enumerate(clients)]
    self.assertEqual(ups[0].format.compressor, 'tpc_v2:randk_b+top_k')
    self.assertEqual(server.format_for(0), ups[0].format)
    # the package's names are its modules' (laq_jax.deploy split in three)
    self.assertIs(deploy.Client, client_lib.Client)
    self.assertIs(deploy.Server, server_lib.Server)
    self.assertIs(deploy.Message, common_lib.Message)
    # the server's copy of Qhat reads client 0's payload as the server does
    part = estimators.REGISTRY.get('tpc_v2')
    q = uplink.decode(part, hyper, 1, 0, ups[0].payload,
                      np.asarray(server.state.last_upload_MxP[0]),
                      num_workers=3, num_bits=ups[0].bits)
    np.testing.assert_allclose(q, np.asarray(clients[0].memory.last_upload_P),
                               rtol=1e-5, atol=1e-7)
    for payload, bits, why in (
        (ups[1].payload, ups[1].bits, 'randk_b mask tag .* another round'),
        (ups[0].payload[:-1], ups[0].bits - 8, 'top_k segment of 3555 bits: '
         'the payload has 3552 left'),
        (ups[0].payload + b'\0', ups[0].bits + 8, 'payload of'),
        (ups[0].payload, ups[0].bits - 1, 'declared as')):
      with self.subTest(why), self.assertRaisesRegex(wire.WireError, why):
        server.receive(0, True, payload, bits)
    server.receive(0, True, ups[0].payload, ups[0].bits)  # still open

  @parameterized.parameters(('laq', dict(step_size=0.5)), ('fedlaq', {}))
  def test_a_round_lost_with_the_clients_memory_is_an_absent_one(
      self, algo, overrides):
    # A ClientApp's process that dies mid-round loses what it wrote that
    # round (and the round's message: the status of its last answer). The
    # server hears nothing: the client is absent, as if refused. Client 1
    # loses round 0, round 7 right after an answer refused at 6 (so it
    # learns of that refusal only at 8), client 2 rounds 3 and 4.
    spec, data, hyper = built(algo, **overrides)
    lost, refuse = {(0, 1), (7, 1), (3, 2), (4, 2)}, {(6, 1)}
    want_server, want_clients, want_sent, want_bits, _ = deployed(
        spec, data, hyper, refuse=lost | refuse, rounds=10)
    clients = [deploy.Client(spec, data, hyper, m) for m in range(3)]
    server = deploy.Server(spec, hyper)
    sent, bits = np.zeros((10, 3), bool), np.zeros((10, 3), int)
    for k in range(10):
      for m, client in enumerate(clients):
        kept = client.memory, client.previous, client.ran
        up = client.round(server.broadcast(m))
        if (k, m) in lost:
          client.memory, client.previous, client.ran = kept
          continue
        sent[k, m], bits[k, m] = up.sent, up.bits
        if (k, m) in refuse:
          server.refuse(m, 'test')
        else:
          server.receive(m, up.sent, up.payload, up.bits)
      server.finish_round()
    taken = [(k, m) for k in range(10) for m in range(3)
             if (k, m) not in lost]
    self.assertEqual([sent[t] for t in taken], [want_sent[t] for t in taken])
    self.assertEqual([bits[t] for t in taken], [want_bits[t] for t in taken])
    self.assertTrue(want_sent.any() and not want_sent.all())
    np.testing.assert_array_equal(np.asarray(server.theta_P),
                                  np.asarray(want_server.theta_P))
    for got, want in zip(clients, want_clients):
      for a, b in zip(jax.tree.leaves(got.memory),
                      jax.tree.leaves(want.memory)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # a message for a round it has answered is refused
    with self.assertRaisesRegex(ValueError, 'round 3 after answering round 9'):
      clients[0].round(deploy.Message(3, np.asarray(server.theta_P),
                                      np.asarray(server.state.history_D)))

  def test_a_users_compressor_with_a_codec_deploys(self):
    # float16 innovations: the compressor and its wire format, both written
    # here, none of it in the library; 'laq+compressor=half' deployed is
    # its simulated run
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    from laq_jax import codecs, compressors  # pylint: disable=g-import-not-at-top

    def half(grad_P, ref_P, key, hyper):
      del key, hyper
      v = (grad_P - ref_P).astype(jnp.float16).astype(grad_P.dtype)
      return compressors.Compressed(ref_P + v,
                                    jnp.int32(16 * grad_P.shape[-1]))

    class Half(codecs.Codec):

      def fixed_bits(self, fmt):
        return 16 * fmt.num_params

      def fields(self, fmt, grad_P, ref_P, value_P, norm=None):
        v = np.asarray(grad_P, np.float32) - np.asarray(ref_P, np.float32)
        return {'half_P': v.astype(np.float16)}

      def encode(self, fmt, fields):
        return np.asarray(fields['half_P'], '>f2').tobytes()

      def decode(self, fmt, payload, ref_P, ends=None):
        codecs.unpack(payload, 16 * fmt.num_params, 'half')
        return ref_P + np.frombuffer(payload, '>f2').astype(np.float32)

    with registry.scoped():
      compressors.REGISTRY.register('half', parts.compressor(
          'half', half, wire=Half()))
      self.assertIn('half', wire.FORMATS)
      spec, data, hyper = built('laq+compressor=half', step_size=0.5)
      # 10 rounds: at step 0.5 a flipped float16 tie (below) spreads; on
      # one machine 1 entry of 7,850 apart after 10 rounds, 956 after 20
      state, trace = loop.run(spec, data, hyper, 10)
      server, clients, sent, bits, sizes = deployed(spec, data, hyper,
                                                    rounds=10)
    np.testing.assert_array_equal(sent, np.asarray(trace.sent_M))
    np.testing.assert_array_equal(bits, np.asarray(trace.bits_M))
    self.assertGreater(sent.sum(), 3)  # not only the first round's
    self.assertTrue(np.all(sizes[sent] == 2 * spec.problem.num_params()))
    # the server holds exactly what each client sent...
    for m, client in enumerate(clients):
      np.testing.assert_array_equal(np.asarray(client.memory.last_upload_P),
                                    np.asarray(server.state.last_upload_MxP[m]))
    # ...and theta is the simulation's but where a gradient entry that the
    # client's program and the simulation's (fused apart) round a last bit
    # apart falls on either side of a float16 rounding tie: one float16
    # step there (measured: 9 of 7,850 entries after 20 rounds on one
    # machine, 1 after 10 on another, at most 3.1e-5)
    gap = np.abs(np.asarray(server.theta_P) - np.asarray(state.theta_P))
    self.assertLess(gap.max(), 2e-4)
    self.assertLess(np.mean(gap > 1e-6), 0.01)
    self.assertNotIn('half', wire.FORMATS)  # gone with its scope

  def test_undeployable_runs_refused_by_name(self):
    spec, data, hyper = built('ef_signsgd', batch_size=100)
    with self.assertRaisesRegex(ValueError, "'sign' has no wire format"):
      deploy.Server(spec, hyper)
    spec, data, hyper = built('laq', precision='float64')
    with self.assertRaisesRegex(ValueError, 'precision float64'):
      deploy.Client(spec, data, hyper, 0)
    spec, _, hyper = built("laq")
    # An estimator of one's own: its upload is not ref + C(g - ref) against
    # a reference the server holds, which is what a payload carries.
    with registry.scoped():
      estimators.REGISTRY.register('mine', parts.estimator(
          'mine', lambda inputs: inputs.compress(
              2 * inputs.grad_P, inputs.qhat_P, inputs.compressor_states)))
      lj.register_algorithm(lj.Algorithm('laq_mine', False, 'uniform', True,
                                         'laq', estimator='mine'))
      with self.assertRaisesRegex(ValueError, "estimator 'mine' is not "
                                  'deployable.*direct, innovation'):
        deploy.check_deployable(spec, lj.make_hyper('laq_mine'), np.float32)
    # 3PC v1 (idealized: y + C(g - y), the server holds no y) and a
    # segment in a slot without a format, by name.
    spec_3pc, _, hyper_3pc = built('tpc_v1')
    with self.assertRaisesRegex(ValueError, "estimator 'tpc_v1' is not "
                                'deployable.*innovation, tpc_v2, tpc_v4, '
                                'marina, dasha, dasha_mvr'):
      deploy.check_deployable(spec_3pc, hyper_3pc, np.float32)
    spec_3pc, _, hyper_3pc = built('tpc_v2+compressor_b=rand_p')
    with self.assertRaisesRegex(ValueError, "compressor 'rand_p' .*slot "
                                'compressor_b.* has no wire format'):
      deploy.check_deployable(spec_3pc, hyper_3pc, np.float32)
    # EF21-P's broadcast (thetahat + top_k_down(theta - thetahat): no
    # wire yet) and EF21-BC's without its server part, by name.
    spec_p, _, hyper_p = built('ef21_p_dcgd')
    with self.assertRaisesRegex(ValueError, "broadcast 'ef21p' is not "
                                'deployable yet'):
      deploy.check_deployable(spec_p, hyper_p, np.float32)
    spec_bc, _, hyper_bc = built('ef21_bc+server=sgd')
    with self.assertRaisesRegex(ValueError, "sends the state of server "
                                "'ef21bc_server': the run's server is 'sgd'"):
      deploy.check_deployable(spec_bc, hyper_bc, np.float32)
    # EF21-BC's broadcast with absent clients dropped: a round no client
    # answers would idle the server while the clients step their theta.
    spec_bc, _, hyper_bc = built('ef21_bc', absent='drop')
    with self.assertRaisesRegex(ValueError, "broadcast 'ef21bc' with "
                                "absent='drop' is not deployable"):
      deploy.check_deployable(spec_bc, hyper_bc, np.float32)
    # Scaffnew's and FedDyn's clients (a state moved after the server's
    # step), FedDyn's server (it reads the round), by name.
    # Differential privacy's noise (to be added before packing: to come).
    for algo, what in (('scaffnew', "client 'scaffnew'"),
                       ('feddyn', "server 'feddyn_server'"),
                       ('fedavg+server=feddyn_server',
                        "server 'feddyn_server'"),
                       ('fedavg+privacy=dp_central',
                        "privacy part 'dp_central'")):
      spec_s, _, hyper_s = built(algo, **(
          dict(weighting='uniform', participation=0.5)
          if 'privacy' in algo else {}))
      with self.assertRaisesRegex(ValueError, what + '.*not deployable yet'):
        deploy.check_deployable(spec_s, hyper_s, np.float32)
    server = deploy.Server(spec, hyper)
    # A client's index is an integer of the round (a bool is an int in
    # Python: True made every client of the round absent).
    for worker in (3, -1, True, 1.0, '1'):
      with self.assertRaisesRegex(wire.WireError,
                                  'is not an integer in 0..2'):
        server.receive(worker, False, None)


if __name__ == '__main__':
  absltest.main()
