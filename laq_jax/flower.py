"""The deployed run on Flower (`pip install .[flower]`): a ClientApp and a
ServerApp built from the library's parts (`laq_jax.deploy`), uploads packed
as `laq_jax.wire` payloads.

    def make_run(run_config):        # -> (spec, data, hyper), in every process
      ...
    client = laq_jax.flower.client_app(make_run)
    server = laq_jax.flower.server_app(make_run)

`experiments/flower_app/` is a ready Flower App on MNIST (its README runs it
on a SuperLink and SuperNodes on localhost).

What travels, per round and client:
  down  theta^k as a float32 ArrayRecord; a ConfigRecord with k, the
        trigger's history (D floats) and whether the server took the
        client's previous upload.
  up    a ConfigRecord: the client's index, `sent`, and on an upload its
        payload (bytes, `wire.encode`: ceil(bits / 8) of them), the bits its
        compressor counted, its format (compressor, b); a skip is that
        notice with no payload.

The server refuses, in one log line naming the client, a reply it cannot
take: a payload of the wrong length, a bit width or level or index out of
range, a NaN or an infinity, a format that is not the run's, a second
answer for the same client in a round, an error reply (the ClientApp
failed); a client that does not answer before the round's timeout is absent
too. A refused or absent client counts as absent for the round (its last
upload stays where it was, `laq_jax.deploy`), and the round goes on.

The ServerApp writes `run_config['out']` (if set): a JSON file with every
round's uploads, counted bits, payload and message bytes per client, the
refusals, and the final parameters.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Callable

import jax
import numpy as np

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from laq_jax import deploy
from laq_jax import wire

log = logging.getLogger('laq_jax.flower')

MakeRun = Callable[[dict], tuple]
_CACHE: dict = {}


def _run(make_run: MakeRun, run_config: dict):
  """make_run's (spec, data, hyper), once per process and run config."""
  key = (id(make_run), json.dumps(dict(run_config), sort_keys=True,
                                  default=str))
  if key not in _CACHE:
    _CACHE[key] = make_run(dict(run_config))
  return _CACHE[key]


def _message_bytes(content: RecordDict) -> int:
  """The serialized size of a message's content (Flower's protobuf)."""
  from flwr.common import serde  # pylint: disable=g-import-not-at-top
  return serde.recorddict_to_proto(content).ByteSize()


# --- the client --------------------------------------------------------------


def _save(context: Context, client: deploy.Client) -> None:
  leaves = jax.tree.leaves(client.memory)
  previous = (jax.tree.leaves(client.previous) if client.previous is not None
              else [])
  context.state['laq.memory'] = ArrayRecord(
      [np.asarray(a) for a in leaves + previous])
  context.state['laq.meta'] = ConfigRecord({'previous': bool(previous)})


def _load(context: Context, client: deploy.Client) -> None:
  if 'laq.memory' not in context.state:
    return
  arrays = context.state['laq.memory'].to_numpy_ndarrays()
  treedef = jax.tree.structure(client.memory)
  n = treedef.num_leaves
  client.memory = jax.tree.unflatten(treedef, arrays[:n])
  if context.state['laq.meta']['previous']:
    client.previous = jax.tree.unflatten(treedef, arrays[n:2 * n])


def client_app(make_run: MakeRun, *, misbehave: Callable | None = None
               ) -> ClientApp:
  """A ClientApp: worker `node_config['partition-id']`'s half of each round
  (`deploy.Client`), its memory kept in the node's context between rounds.

  `misbehave(run_config, step, reply, worker) -> reply`, if given,
  rewrites the reply (a dict) before it leaves (tests of the server's
  gate)."""
  app = ClientApp()

  @app.train()
  def train(msg: Message, context: Context):
    spec, data, hyper = _run(make_run, context.run_config)
    worker = int(context.node_config['partition-id'])
    client = deploy.Client(spec, data, hyper, worker)
    _load(context, client)
    round_ = msg.content['round']
    message = deploy.Message(
        int(round_['step']), msg.content['theta'].to_numpy_ndarrays()[0],
        np.asarray(round_['history'], np.float32), bool(round_['taken']))
    upload = client.round(message)
    _save(context, client)
    reply = {'worker': worker, 'sent': upload.sent,
             'compressor': client.format.compressor,
             'width': client.format.bits, 'bits': upload.bits}
    if upload.sent:
      reply['payload'] = upload.payload
    if misbehave is not None:
      reply = misbehave(dict(context.run_config), message.step, reply,
                        worker)
    return Message(RecordDict({'upload': ConfigRecord(reply)}), reply_to=msg)

  return app


# --- the server --------------------------------------------------------------


def _check_format(server: deploy.Server, reply) -> None:
  fmt = server.format
  if reply.get('compressor') != fmt.compressor:
    raise wire.WireError(f'compressor {reply.get("compressor")!r}: the run '
                         f'sends {fmt.compressor!r}')
  width = int(reply.get('width', 0))
  if fmt.compressor == 'uniform' and width != fmt.bits:
    raise wire.WireError(
        f'bit width {width} ' + ('out of range 1..32' if not
                                 1 <= width <= 32 else '')
        + f' (the run\'s b = {fmt.bits})')
  if reply.get('sent') and 'payload' in reply:
    bits = int(reply.get('bits', -1))
    if fmt.fixed_bits() is not None and bits != fmt.fixed_bits():
      raise wire.WireError(f'{bits} bits counted: the format sends '
                           f'{fmt.fixed_bits()}')


def serve(grid: Grid, make_run: MakeRun, run_config: dict) -> dict:
  """Runs `run_config['rounds']` rounds with the clients on `grid`
  (waiting up to `run_config['wait-s']` for `run_config['clients']` of
  them); returns (and writes to run_config['out'], if set) the record."""
  spec, data, hyper = _run(make_run, run_config)
  counts = None if data.count_M is None else np.asarray(data.count_M)
  server = deploy.Server(spec, hyper, counts)
  rounds = int(run_config.get('rounds', 20))
  timeout = float(run_config.get('round-timeout-s', 120))
  wanted = int(run_config.get('clients', spec.num_workers))
  deadline = time.monotonic() + float(run_config.get('wait-s', 120))
  nodes = list(grid.get_node_ids())
  while len(nodes) < wanted and time.monotonic() < deadline:
    time.sleep(0.5)
    nodes = list(grid.get_node_ids())
  if len(nodes) < wanted:
    raise RuntimeError(f'{len(nodes)} of {wanted} clients connected')
  node_of: dict[int, int] = {}  # worker -> node
  record = {'rounds': [], 'refusals': []}
  start = time.perf_counter()
  for k in range(rounds):
    worker_of = {n: w for w, n in node_of.items()}
    messages = []
    for node in nodes:
      w = worker_of.get(node)
      msg = server.broadcast(w if w is not None else 0)
      taken = bool(server.taken_last[w]) if w is not None else True
      content = RecordDict({
          'theta': ArrayRecord([np.asarray(msg.theta_P, np.float32)]),
          'round': ConfigRecord({'step': k, 'history': [
              float(h) for h in msg.history_D], 'taken': taken})})
      messages.append(Message(content=content, dst_node_id=node,
                              message_type='train'))
    down_bytes = _message_bytes(messages[0].content)
    round_start = time.perf_counter()
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    wall = time.perf_counter() - round_start
    per_client = {}
    for reply in replies:
      node = reply.metadata.src_node_id
      known = worker_of.get(node)  # who this node answered as before
      who = known
      try:
        if reply.has_error():
          raise wire.WireError(f'error reply: {reply.error.reason}')
        up = reply.content['upload']
        w = up.get('worker')
        if not isinstance(w, int):
          raise wire.WireError(f'client index {w!r} is not an integer')
        if who is None and node_of.get(w, node) == node:
          who = w
        if known is not None and w != known:
          raise wire.WireError(f'node {node} answered as client {w}')
        if node_of.get(w, node) != node:
          raise wire.WireError(f'client {w} answered round {k} twice (again '
                               f'from node {node})')
        _check_format(server, up)
        payload = up.get('payload')
        server.receive(w, bool(up.get('sent')), payload)
        node_of.setdefault(w, node)
        per_client[w] = {
            'sent': bool(up.get('sent')), 'bits': int(up.get('bits', 0)),
            'payload_bytes': len(payload) if payload else 0,
            'message_bytes': _message_bytes(reply.content)}
      except (wire.WireError, KeyError, TypeError, ValueError) as e:
        name = who if who is not None else f'on node {node}'
        log.warning('round %d: refused client %s: %s', k, name, e)
        if who is not None:
          server.refuse(who, str(e))
        record['refusals'].append({'round': k, 'client': name,
                                   'reason': str(e)})
    answered = {node_of.get(w) for w in per_client}
    for w, node in node_of.items():
      if w not in per_client and node not in answered and not any(
          r['round'] == k and r['client'] == w for r in record['refusals']):
        log.warning('round %d: client %d absent (no reply in %g s)', k, w,
                    timeout)
        record['refusals'].append({'round': k, 'client': w,
                                   'reason': 'no reply'})
    taken = server.finish_round()
    record['rounds'].append({'round': k, 'wall_s': wall,
                             'down_message_bytes': down_bytes,
                             'clients': {str(w): c for w, c in
                                         sorted(per_client.items())},
                             'taken': [bool(t) for t in taken]})
  record['wall_s'] = time.perf_counter() - start
  record['theta'] = np.asarray(server.theta_P).tolist()
  record['num_params'] = int(server.format.num_params)
  record['compressor'] = server.format.compressor
  out = run_config.get('out')
  if out:
    tmp = f'{out}.tmp'
    with open(tmp, 'w') as f:
      json.dump(record, f)
    os.replace(tmp, out)
  return record


def server_app(make_run: MakeRun) -> ServerApp:
  """A ServerApp running `serve` with the run's config."""
  app = ServerApp()

  @app.main()
  def main(grid: Grid, context: Context) -> None:
    serve(grid, make_run, dict(context.run_config))

  return app


__all__ = ['client_app', 'serve', 'server_app']
