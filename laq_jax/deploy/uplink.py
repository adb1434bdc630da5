"""Uploads in segments: an estimator's wire (`codecs.Uplink`), run on the
worker to write a payload and on the server to read it. ::

    fmt = uplink.plan(part, hyper, step)          # the round's segments
    payload, fmt, bits = uplink.encode(part, hyper, step, worker, g, qhat,
                                       state)     # on the worker
    q = uplink.decode(part, hyper, step, worker, payload, qhat,
                      num_workers=M, num_bits=bits)   # on the server

An estimator whose upload is not one compressor's payload against a
reference the server holds (MARINA: g on the coin's rounds, else Qhat +
C(g - y); 3PC v2: Qhat + Q(g - y), then + C(g - b)) declares how it
travels as one function of an `io` (its `Part.wire`); here that function
runs three ways: `plan` (the formats alone, from the round: its coin),
`encode` (the worker: each segment's fields from what it compressed, as
`wire.fields_of` recomputes them) and `decode` (the server: each segment
decoded against its reference, `wire.decode` with its checks, and Q from
them). The payload is the segments' bits end to end (one bit string, whole
bytes at its end only: the counted bits rounded up), each in its
compressor's format with its compressor key (`randomness.compress_key`;
the second slot's `fold_in(key, 1)`, as `estimators.estimate` draws it).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import parts as parts_lib
from laq_jax import randomness
from laq_jax.deploy import wire
from laq_jax.parts import codecs
from laq_jax.parts import compressors as compressors_lib
from laq_jax.round import hyper as hyper_lib

SLOTS = ('compressor', 'compressor_b', 'identity')


class UplinkFormat:
  """A round's upload in segments: `compressor` names them
  ('marina:randk', 'tpc_v2:randk_b+top_k'), `values` their codecs' values
  by segment ('randk_b.k', 'top_k.k'), `segments` their `wire.Format`s."""

  def __init__(self, estimator: str, segments: tuple[wire.Format, ...]):
    self.segments = tuple(segments)
    self.num_params = self.segments[0].num_params
    self.compressor = (f'{estimator}:'
                       + '+'.join(f.compressor for f in self.segments))
    self.values = {f'{f.compressor}.{n}': v for f in self.segments
                   for n, v in f.values.items()}

  def fixed_bits(self) -> int | None:
    bits = [f.fixed_bits() for f in self.segments]
    return None if None in bits else sum(bits)

  def __eq__(self, other):
    return (isinstance(other, UplinkFormat)
            and (self.compressor, self.segments)
            == (other.compressor, other.segments))

  def __hash__(self):
    return hash((self.compressor, self.segments))

  def __repr__(self):
    return f'UplinkFormat({self.compressor!r}, {self.values})'


def slot_compressor(slot: str, hyper) -> str:
  """The compressor a slot holds at this point."""
  if slot not in SLOTS:
    raise ValueError(f'uplink slot {slot!r}: the slots are '
                     f'{", ".join(SLOTS)}')
  if slot == 'identity':
    return 'identity'
  index = hyper.compressor if slot == 'compressor' else hyper.compressor_b
  return compressors_lib.REGISTRY.names[int(np.asarray(index))]


def _slot_key(slot: str, seed, step: int, worker: int):
  key = randomness.compress_key(seed, step, worker)
  return jax.random.fold_in(key, 1) if slot == 'compressor_b' else key


@functools.partial(jax.jit, static_argnums=0)
def _compress(name: str, x_P, ref_P, key, hyper):
  """ref + C(x - ref) and its bits, C the compressor `name`, as the
  estimator's slot computes it."""
  part = compressors_lib.REGISTRY.get(name)
  hyper = hyper._replace(compressor=jnp.asarray(
      compressors_lib.index(name), jnp.asarray(hyper.compressor).dtype))
  out, _ = compressors_lib.compress(x_P, ref_P, key, hyper, [part], {})
  return out.value_P, out.bits


class _Io:
  """What an uplink fn reads (`codecs.Uplink`); `send` is the half's."""

  def __init__(self, part, hyper, step, worker, qhat_P, grad=None,
               state=None, new_state=None):
    self.part = part
    self.hyper = hyper_lib.cast(hyper, jnp.float32)  # (as the round's)
    self.step, self.worker = int(step), int(worker)
    self.num_params = int(np.shape(qhat_P)[-1])
    self.qhat = np.asarray(qhat_P, np.float32)
    self.coin = np.float32(randomness.round_coin(hyper.seed, self.step,
                                                 jnp.float32))
    self._grad, self._state, self._new_state = grad, state, new_state
    self.formats: list[wire.Format] = []

  @staticmethod
  def _worker_only(value, what: str):
    """A value only the worker holds (g, the estimator's state): reading
    it on the server is refused."""
    if value is None:
      raise ValueError(f'an uplink read {what} on the server: it is read '
                       'only inside a segment\'s x (the worker\'s half)')
    return value

  def grad(self):
    return np.asarray(self._worker_only(self._grad, 'g'), np.float32)

  @property
  def state(self):
    return self._worker_only(self._state, 'the estimator\'s state')

  @property
  def new_state(self):
    return self._worker_only(self._new_state, 'the estimator\'s new state')

  def format_of(self, slot: str) -> wire.Format:
    name = slot_compressor(slot, self.hyper)
    fmt = wire.Format.of(name, self.num_params, self.hyper)
    if self.formats and self.formats[-1].fixed_bits() is None:
      raise ValueError(f'uplink of {self.part.name!r}: segment '
                       f'{self.formats[-1].compressor!r} has no fixed length '
                       'and is not the last')
    self.formats.append(fmt)
    return fmt

  def key(self, slot: str):
    return _slot_key(slot, self.hyper.seed, self.step, self.worker)

  def reference(self, ref_P) -> np.ndarray:
    return (np.zeros(self.num_params, np.float32) if ref_P is None
            else np.asarray(ref_P, np.float32))

  def run(self) -> Any:
    return self.part.wire.fn(self, params=parts_lib.own_params(self.hyper,
                                                               self.part))

  def uplink_format(self) -> UplinkFormat:
    return UplinkFormat(self.part.name, tuple(self.formats))


class _Plan(_Io):
  def send(self, slot: str, x: Callable, ref_P) -> np.ndarray:
    del x
    self.format_of(slot)
    return self.reference(ref_P)


class _Encoder(_Io):
  def __init__(self, *args, **kw):
    super().__init__(*args, **kw)
    self.pieces: list[np.ndarray] = []  # each segment's bits
    self.bits = 0

  def send(self, slot: str, x: Callable, ref_P) -> np.ndarray:
    fmt = self.format_of(slot)
    x_P, ref = np.asarray(x(), np.float32), self.reference(ref_P)
    key = self.key(slot)
    value, bits = _compress(fmt.compressor, jnp.asarray(x_P),
                            jnp.asarray(ref), key, self.hyper)
    value = np.asarray(value, np.float32)
    fields = wire.fields_of(fmt, x_P, ref, value, key=key)
    count = int(bits) if fmt.fixed_bits() is None else fmt.fixed_bits()
    self.pieces.append(np.unpackbits(np.frombuffer(
        wire.encode(fmt, fields), np.uint8))[:count])
    self.bits += count
    return value


class _Decoder(_Io):
  def __init__(self, *args, payload: bytes, num_workers: int,
               num_bits: int | None, **kw):
    super().__init__(*args, **kw)
    self.stream = np.unpackbits(np.frombuffer(payload, np.uint8))
    self.num_workers, self.declared = num_workers, num_bits
    self.at = 0  # the bits read

  def send(self, slot: str, x: Callable, ref_P) -> np.ndarray:
    del x
    fmt = self.format_of(slot)
    bits = fmt.fixed_bits()
    if bits is None:  # (the last segment) the rest, or the declared rest
      bits = (len(self.stream) - self.at if self.declared is None
              else self.declared - self.at)
    piece = self.stream[self.at:self.at + bits]
    if len(piece) < bits or bits < 0:
      raise wire.WireError(f'{fmt.compressor} segment of {bits} bits: the '
                           f'payload has {len(self.stream) - self.at} left')
    self.at += bits
    return wire.decode(fmt, codecs.pack(piece), self.reference(ref_P),
                       num_workers=self.num_workers,
                       num_bits=bits if fmt.fixed_bits() is not None or
                       self.declared is not None else None,
                       key=self.key(slot))


def plan(part, hyper, step: int, num_params: int) -> UplinkFormat:
  """The round's segments and their formats (from the round alone)."""
  io = _Plan(part, hyper, step, 0, np.zeros(num_params, np.float32))
  io.run()
  return io.uplink_format()


def encode(part, hyper, step: int, worker: int, grad_P, qhat_P, state,
           new_state=None) -> tuple[bytes, UplinkFormat, int]:
  """The worker's payload (the segments' bits end to end), its format and
  its bits, from g, its copy of Qhat and the estimator's state before and
  after the round."""
  io = _Encoder(part, hyper, step, worker, qhat_P, grad=grad_P, state=state,
                new_state=new_state)
  io.run()
  return codecs.pack(np.concatenate(io.pieces)), io.uplink_format(), io.bits


def decode(part, hyper, step: int, worker: int, payload: bytes, qhat_P, *,
           num_workers: int, num_bits: int | None = None) -> np.ndarray:
  """Q from the payload and the server's copy of Qhat; WireError on a
  payload its segments' formats cannot hold, or whose length or declared
  bits are not theirs."""
  if not isinstance(payload, (bytes, bytearray)):
    raise wire.WireError(f'payload of type {type(payload).__name__}: bytes '
                         'expected')
  planned = plan(part, hyper, step, int(np.shape(qhat_P)[-1]))
  longest = sum(f.max_bits() for f in planned.segments)
  if len(payload) > wire.payload_bytes(longest):
    raise wire.WireError(f'{planned.compressor} payload of {len(payload):,} '
                         f'bytes: a valid one takes at most '
                         f'{wire.payload_bytes(longest):,} (refused before it '
                         'is read)')
  io = _Decoder(part, hyper, step, worker, qhat_P, payload=bytes(payload),
                num_workers=num_workers, num_bits=num_bits)
  value = np.asarray(io.run(), np.float32)
  fmt = io.uplink_format()
  if len(payload) != wire.payload_bytes(io.at) or io.stream[io.at:].any():
    raise wire.WireError(f'{fmt.compressor} payload of {len(payload)} bytes: '
                         f'its segments take {io.at} bits '
                         f'({wire.payload_bytes(io.at)} bytes, the spare bits '
                         '0)')
  fixed = fmt.fixed_bits()
  if num_bits is not None and fixed is not None and num_bits != fixed:
    raise wire.WireError(f'{fmt.compressor} payload declared as {num_bits} '
                         f'bits: its segments take {fixed}')
  codecs.finite(value, f'{fmt.compressor} reconstruction')
  top = float(np.max(np.abs(value))) if value.size else 0.0
  if top > wire.bound(num_workers):
    raise wire.WireError(f'{fmt.compressor} reconstruction: |value| '
                         f'{top:.3e} exceeds the bound '
                         f'{wire.bound(num_workers):.3e} (float32\'s largest '
                         f'over 4 M, M = {num_workers})')
  return value


__all__ = ['SLOTS', 'UplinkFormat', 'decode', 'encode', 'plan',
           'slot_compressor']
