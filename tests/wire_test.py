"""laq_jax.wire: payloads are the counted bits rounded up to bytes, decode
to exactly what the compressor produced, and a bad payload is refused."""

import math

from absl.testing import absltest, parameterized
import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import compressors, hyper as hyper_lib, quantize, wire

P = 7850
RNG = np.random.default_rng(0)
G = RNG.normal(size=P).astype(np.float32)
G[:300] = 0  # zero gradients, as MNIST's blank pixels give
REF = (RNG.normal(size=P) * 0.1).astype(np.float32)
KEY = jax.random.PRNGKey(3)


def _hyper(**params):
  h = hyper_lib.make_hyper('qsgd', dtype=jnp.float32)
  return h._replace(params={**h.params, **params})


class BitsTest(absltest.TestCase):

  def test_fields_round_trip_big_endian(self):
    # laq_jax.parts.bits: widths that do not fill bytes, the spare bits 0
    from laq_jax.parts import bits  # pylint: disable=g-import-not-at-top
    values = np.array([0, 1, 5, 6], np.uint64)
    b = np.concatenate([bits.uint_bits(values, 3),
                        bits.float_bits([1.5, -0.0])])
    self.assertEqual(b.size, 3 * 4 + 64)
    np.testing.assert_array_equal(b[:6], [0, 0, 0, 0, 0, 1])  # 0, then 1
    payload = bits.pack(b)
    self.assertEqual(len(payload), bits.payload_bytes(b.size))  # 10 bytes
    back = bits.unpack(payload, b.size, 'test')
    np.testing.assert_array_equal(bits.read_uint(back[:12], 3), values)
    np.testing.assert_array_equal(bits.read_float(back[12:]),
                                  np.float32([1.5, -0.0]))
    self.assertTrue(np.signbit(bits.read_float(back[12:])[1]))
    spare = payload[:-1] + bytes([payload[-1] | 1])
    with self.assertRaisesRegex(bits.WireError, 'spare bits after bit 76'):
      bits.unpack(spare, b.size, 'test')
    with self.assertRaisesRegex(bits.WireError, 'takes 10'):
      bits.unpack(payload + b'\0', b.size, 'test')


class RoundTripTest(parameterized.TestCase):

  @parameterized.parameters(1, 2, 3, 4, 8, 16)
  def test_uniform(self, b):
    q = jax.jit(quantize.quantize_innovation)(G, REF, jnp.int32(b))
    fmt = wire.Format('uniform', P, bits=b)
    payload = wire.encode(fmt, wire.fields_of(fmt, G, REF, q.value_P))
    self.assertLen(payload, math.ceil((b * P + 32) / 8))
    np.testing.assert_array_equal(wire.decode(fmt, payload, REF),
                                  np.asarray(q.value_P))

  @parameterized.parameters(1, 16, 10_000)
  def test_qsgd(self, s):
    out = jax.jit(compressors.qsgd)(
        G, jnp.zeros(P, jnp.float32), KEY, _hyper(qsgd={'levels': jnp.int32(s)}))
    fmt = wire.Format('qsgd', P, levels=s)
    fields = wire.fields_of(fmt, G, np.zeros(P, np.float32), out.value_P)
    payload = wire.encode(fmt, fields)
    # the count the compressor made is the payload's, bit for bit
    self.assertEqual(int(out.bits), wire.qsgd_bits(fields))
    self.assertLen(payload, math.ceil(int(out.bits) / 8))
    np.testing.assert_array_equal(
        wire.decode(fmt, payload, np.zeros(P, np.float32)),
        np.asarray(out.value_P))

  @parameterized.parameters(1, 78, P)
  def test_top_k(self, k):
    out = jax.jit(compressors.top_k)(G, REF, KEY,
                                     _hyper(top_k={'k': jnp.float32(k)}))
    fmt = wire.Format('top_k', P, k=k)
    payload = wire.encode(fmt, wire.fields_of(fmt, G, REF, out.value_P))
    self.assertLen(payload, math.ceil(k * (32 + math.ceil(math.log2(P))) / 8))
    self.assertEqual(int(out.bits), k * (32 + 13))
    np.testing.assert_array_equal(wire.decode(fmt, payload, REF),
                                  np.asarray(out.value_P))

  @parameterized.parameters(1, 78, P)
  def test_randk(self, k):
    # The mask is drawn from the key on both sides: the payload is the
    # key's 32-bit tag and the k scaled values, 32 k + 32 bits.
    out = jax.jit(compressors.randk)(G, REF, KEY,
                                     _hyper(randk={'k': jnp.float32(k)}))
    fmt = wire.Format('randk', P, k=k)
    fields = wire.fields_of(fmt, G, REF, out.value_P, key=KEY)
    payload = wire.encode(fmt, fields)
    self.assertEqual(int(out.bits), 32 * k + 32)
    self.assertLen(payload, 4 * k + 4)
    self.assertEqual(int(fields['tag']),
                     int(jax.random.bits(KEY, (), jnp.uint32)))
    # the kept coordinates are where Q left Qhat, p / k times v there
    moved = np.flatnonzero(np.asarray(out.value_P) != REF)
    self.assertTrue(set(moved) <= set(fields['indices_K']))
    np.testing.assert_array_equal(wire.decode(fmt, payload, REF, key=KEY),
                                  np.asarray(out.value_P))
    # another round's (or client's) key: its tag is refused, nothing decoded
    with self.assertRaisesRegex(wire.WireError, 'mask tag .* another round'):
      wire.decode(fmt, payload, REF, key=jax.random.fold_in(KEY, 1))
    with self.assertRaisesRegex(ValueError, 'pass key='):
      wire.decode(fmt, payload, REF)

  def test_identity(self):
    fmt = wire.Format('identity', P)
    payload = wire.encode(fmt, {'value_P': G})
    self.assertLen(payload, 4 * P)
    np.testing.assert_array_equal(wire.decode(fmt, payload, REF), G)

  def test_qsgd_bits_by_hand(self):
    # norm 32 bits; levels [0, 3, 0, 0, -1]: gap 2 ('010'), sign 0, level 3
    # ('011'); gap 3 ('011'), sign 1, level 1 ('1'): 32 + 7 + 5 bits
    fmt = wire.Format('qsgd', 5, levels=4)
    fields = {'norm': np.float32(2.0),
              'signed_levels_P': np.array([0, 3, 0, 0, -1])}
    self.assertEqual(wire.qsgd_bits(fields), 44)
    payload = wire.encode(fmt, fields)
    self.assertLen(payload, 6)
    bits = ''.join(f'{b:08b}' for b in payload)
    self.assertEqual(bits[32:44], '0100011' + '01111')
    np.testing.assert_allclose(wire.decode(fmt, payload, np.zeros(5)),
                               [0, 1.5, 0, 0, -0.5])


class RefusalTest(parameterized.TestCase):

  def _uniform(self, b=4):
    q = quantize.quantize_innovation(G, REF, jnp.int32(b))
    fmt = wire.Format('uniform', P, bits=b)
    return fmt, wire.encode(fmt, wire.fields_of(fmt, G, REF, q.value_P))

  def test_wrong_length(self):
    fmt, payload = self._uniform()
    for bad in (payload[:-1], payload + b'\0', b''):
      with self.assertRaisesRegex(wire.WireError, 'bytes: the format takes'):
        wire.decode(fmt, bad, REF)

  def test_nan_and_inf_radius(self):
    fmt, payload = self._uniform(b=4)  # 4 P + 32 bits: the radius is last
    for value in (np.nan, np.inf):
      bad = payload[:-4] + np.array(value, '>f4').tobytes()
      with self.assertRaisesRegex(wire.WireError, 'non-finite'):
        wire.decode(fmt, bad, REF)

  def test_finite_fields_that_reconstruct_out_of_bounds(self):
    # Every field finite, the reconstruction inf or near float32's largest:
    # it would poison the aggregate for good (issue 52). Refused.
    fmt = wire.Format('uniform', P, bits=4)
    codes = np.full(P, 15)
    for radius in (3e38, 1e38):
      bad = wire.encode(fmt, {'codes_P': codes,
                                'radius': np.float32(radius)})
      with self.assertRaisesRegex(wire.WireError, r'^uniform reconstruction: '
                                  r'(.*non-finite|\|value\| .* exceeds the '
                                  r'bound)'):
        wire.decode(fmt, bad, REF, num_workers=3)
    qsgd = wire.Format('qsgd', P, levels=10)
    fields = {'norm': np.float32(3e38),
              'signed_levels_P': (np.eye(1, P, 0)[0] * 10).astype(int)}
    with self.assertRaisesRegex(wire.WireError, 'qsgd reconstruction: '):
      wire.decode(qsgd, wire.encode(qsgd, fields), np.zeros(P, np.float32),
                  num_workers=3)
    # The bound is float32's largest over 4 M; honest payloads pass.
    self.assertEqual(wire.bound(3),
                     float(np.finfo(np.float32).max) / 12)
    fmt, payload = self._uniform()
    wire.decode(fmt, payload, REF, num_workers=3)

  def test_the_declared_bits_are_the_payloads(self):
    # A qsgd payload cut by a byte can parse as another update; with the
    # count its client declares, the server refuses it (issue 52: 62 of 300
    # cut payloads decoded). A fixed format's count is its format's.
    out = jax.jit(compressors.qsgd)(
        G, jnp.zeros(P, jnp.float32), KEY,
        _hyper(qsgd={'levels': jnp.int32(16)}))
    fmt = wire.Format('qsgd', P, levels=16)
    zeros = np.zeros(P, np.float32)
    payload = wire.encode(fmt, wire.fields_of(fmt, G, zeros, out.value_P))
    bits = int(out.bits)
    np.testing.assert_array_equal(
        wire.decode(fmt, payload, zeros, num_bits=bits), out.value_P)
    for cut in (payload[:-1], payload[:-2]):
      with self.assertRaisesRegex(wire.WireError, 'declared as'):
        wire.decode(fmt, cut, zeros, num_bits=bits)
    with self.assertRaisesRegex(wire.WireError, 'its entries end at bit'):
      wire.decode(fmt, payload, zeros, num_bits=bits - 1)  # same bytes
    # A payload that does not parse: the decoder's reason, not "ends at None".
    with self.assertRaisesRegex(wire.WireError, 'trailing zero bits'):
      wire.decode(fmt, b'\0' * 16, zeros, num_bits=128)
    with self.assertRaisesRegex(wire.WireError, 'declared bits True'):
      wire.decode(fmt, payload, zeros, num_bits=True)
    ufmt, upayload = self._uniform()
    with self.assertRaisesRegex(wire.WireError, 'declared as 31433 bits: '
                                'the format takes 31432'):
      wire.decode(ufmt, upayload + b'\0', REF, num_bits=4 * P + 33)

  def test_an_oversized_payload_is_refused_before_it_is_read(self):
    # Decoding allocated ~24x a payload before refusing it (50 MB -> 1.5
    # GB); no valid payload is longer than the format's max_bits.
    fmt = wire.Format('qsgd', P, levels=16)
    limit = wire.payload_bytes(fmt.max_bits())
    self.assertLess(limit, 64 * P)
    with self.assertRaisesRegex(wire.WireError, r'^qsgd payload of '
                                r'[0-9,]+ bytes: a valid one takes at most '):
      wire.decode(fmt, b'\xff' * (limit + 1), np.zeros(P, np.float32))
    dense = wire.Format('qsgd', P, levels=2**20)  # every entry at its longest
    signed = np.full(P, -2**20)
    full = wire.encode(dense, {'norm': np.float32(1.0),
                               'signed_levels_P': signed})
    self.assertLessEqual(len(full), wire.payload_bytes(dense.max_bits()))

  def test_spare_bits(self):
    fmt = wire.Format('uniform', 3, bits=3)  # 41 bits: 7 spare
    payload = wire.encode(fmt, {'codes_P': np.array([1, 2, 7]),
                                'radius': np.float32(1)})
    with self.assertRaisesRegex(wire.WireError, 'spare bits'):
      wire.decode(fmt, payload[:-1] + bytes([payload[-1] | 1]), np.zeros(3))

  def test_top_k_index_out_of_range_and_repeats(self):
    fmt = wire.Format('top_k', 10, k=2)  # 4-bit indices: 10..15 fit
    bad = wire.encode(fmt, {'indices_K': np.array([3, 12]),
                            'values_K': np.ones(2)})
    with self.assertRaisesRegex(wire.WireError, 'index 12 out of range'):
      wire.decode(fmt, bad, np.zeros(10))
    twice = wire.encode(fmt, {'indices_K': np.array([3, 3]),
                              'values_K': np.ones(2)})
    with self.assertRaisesRegex(wire.WireError, 'ascending'):
      wire.decode(fmt, twice, np.zeros(10))

  def test_qsgd_level_and_index_out_of_range(self):
    big = wire.encode(wire.Format('qsgd', 5, levels=100), {
        'norm': np.float32(1), 'signed_levels_P': np.array([0, 50, 0, 0, 0])})
    with self.assertRaisesRegex(wire.WireError, 'level 50 out of range'):
      wire.decode(wire.Format('qsgd', 5, levels=16), big, np.zeros(5))
    far = wire.encode(wire.Format('qsgd', 9, levels=4), {
        'norm': np.float32(1), 'signed_levels_P': np.array([0] * 8 + [1])})
    with self.assertRaisesRegex(wire.WireError, 'index 8 out of range'):
      wire.decode(wire.Format('qsgd', 5, levels=4), far, np.zeros(5))

  def test_not_bytes(self):
    with self.assertRaisesRegex(wire.WireError, 'bytes expected'):
      wire.decode(wire.Format('identity', 2), [1, 2], np.zeros(2))

  def test_formats_refused_by_name(self):
    with self.assertRaisesRegex(ValueError, "'sign' has no wire format"):
      wire.Format('sign', 10)
    with self.assertRaisesRegex(ValueError, r'bits=40: it must be in 1\.\.32'):
      wire.Format('uniform', 10, bits=40)
    h = hyper_lib.make_hyper('laq', authors_code=True)
    with self.assertRaisesRegex(ValueError, 'authors_code'):
      wire.Format.of('uniform', 10, h)


if __name__ == '__main__':
  absltest.main()
