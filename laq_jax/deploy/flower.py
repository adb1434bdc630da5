"""The deployed run on Flower (`pip install .[flower]`): a ClientApp and a
ServerApp built from the library's parts (`laq_jax.deploy`), uploads packed
as `laq_jax.wire` payloads. ::

    def make_run(run_config):  # in every process: {name: (spec, data, hyper)}
      ...
    client = laq_jax.flower.client_app(make_run)
    server = laq_jax.flower.server_app(make_run)

`make_run` may name several runs of the same clients (a comparison: laq,
lag, fedpaq and fedavg): they run side by side, one message per client and
round carrying each run's part, so a round starts each ClientApp process
once (Flower 1.42 starts one per message) however many runs it serves.

`experiments/flower_app/` is a ready Flower App on MNIST (its README runs it
on a SuperLink and SuperNodes on localhost).

What travels, per round, client and run (the run's name prefixes its
records)::

  down  theta^k as a float32 ArrayRecord; a ConfigRecord with k, the
        client's index (the server's: below), the trigger's history (D
        floats) and the last round whose answer the server took from it.
        Under a broadcast with a wire (EF21-BC's) no theta: a ConfigRecord
        `down` with the server's payloads of the rounds since then
        (`rounds`, `payloads`), from which the client steps its own.
  up    a ConfigRecord: `sent`, and on an upload its payload (bytes,
        `wire.encode`: ceil(bits / 8) of them), the bits its compressor
        counted, its format (the compressor and its codec's values,
        `format.bits`...); a skip is that notice with no payload.

A client's identity is the transport's: the server numbers the nodes it
serves (the first `clients` of the SuperLink's node ids, in id order) and
tells each its index; a reply is its node's, whatever it says (no field of
it names a client), and a node it does not serve is not heard.

The server refuses, in one log line naming the client, a reply it cannot
take: a payload of the wrong length or of another length than the bits
it declares, a format value (a bit width, levels, k) not the run's, a
level or index out of range, a NaN or an
infinity or a value over `wire.bound`, a format that is not the run's, a
second answer from the same node in a round, an error reply (the ClientApp
failed); a client that does not answer before the round's timeout is absent
too (the first round, where the clients compile, waits up to
`first-round-timeout-s`, by default the larger of the round's and
FIRST_ROUND_TIMEOUT_S). A refused or absent client counts as absent for
the round (its last upload stays where it was, `laq_jax.deploy`), and the
round goes on.

The ServerApp writes `run_config['out']` (if set): a JSON file with, per
run, every round's uploads, counted bits, payload and message bytes and
upload time per client, the refusals, and the final parameters.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

try:
  from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
  from flwr.clientapp import ClientApp
  from flwr.serverapp import Grid, ServerApp
except ImportError as e:  # the optional extra
  raise ImportError('laq_jax.flower needs Flower: pip install ".[flower]" '
                    '(flwr==1.42.0)') from e

from laq_jax import deploy
from laq_jax.deploy import wire

# Under Flower's logger, so the lines reach `flwr run --stream` and `flwr log`.
log = logging.getLogger('flwr').getChild('laq_jax')
# How long the first round waits for replies at least, s: each client
# compiles its program there (a 2-core CPU busy with other work took more
# than 40 s).
FIRST_ROUND_TIMEOUT_S = 300.0

MakeRun = Callable[[dict], Mapping[str, tuple]]
_CACHE: dict = {}


def _runs(make_run: MakeRun, run_config: dict) -> dict[str, tuple]:
  """make_run's {name: (spec, data, hyper)} (a single tuple: {'run': it}),
  once per process and run config."""
  key = (id(make_run), json.dumps(dict(run_config), sort_keys=True,
                                  default=str))
  if key not in _CACHE:
    runs = make_run(dict(run_config))
    if isinstance(runs, tuple):
      runs = {'run': runs}
    for name in runs:
      if not name.isidentifier():
        raise ValueError(f'run name {name!r}: it must be an identifier')
    _CACHE[key] = dict(runs)
  return _CACHE[key]


def _message_bytes(content: RecordDict) -> int:
  """The serialized size of a message's content (Flower's protobuf)."""
  from flwr.common import serde  # pylint: disable=g-import-not-at-top
  return serde.recorddict_to_proto(content).ByteSize()


# --- the client --------------------------------------------------------------


def _save(context: Context, name: str, client: deploy.Client) -> None:
  leaves = jax.tree.leaves(client.memory)
  previous = (jax.tree.leaves(client.previous) if client.previous is not None
              else [])
  held = client.held
  context.state[f'{name}.memory'] = ArrayRecord(
      [np.asarray(a) for a in leaves + previous])
  context.state[f'{name}.held'] = ArrayRecord(
      [np.asarray(held.theta_P), np.asarray(held.copy_P)])
  context.state[f'{name}.meta'] = ConfigRecord({'previous': bool(previous),
                                                'ran': client.ran,
                                                'version': held.version})


def _load(context: Context, name: str, client: deploy.Client) -> None:
  if f'{name}.memory' not in context.state:
    return
  arrays = context.state[f'{name}.memory'].to_numpy_ndarrays()
  treedef = jax.tree.structure(client.memory)
  n = treedef.num_leaves
  client.memory = jax.tree.unflatten(treedef, arrays[:n])
  meta = context.state[f'{name}.meta']
  if meta['previous']:
    client.previous = jax.tree.unflatten(treedef, arrays[n:2 * n])
  client.ran = int(meta['ran'])
  theta, copy = context.state[f'{name}.held'].to_numpy_ndarrays()
  client.held = deploy.Held(jnp.asarray(theta), jnp.asarray(copy),
                            int(meta['version']))


def client_app(make_run: MakeRun, *, misbehave: Callable | None = None
               ) -> ClientApp:
  """A ClientApp: the half of each round of every run `make_run` names
  (`deploy.Client`) of the worker the server's message names (the server
  numbers its nodes), its memory kept in the node's context between
  rounds.

  `misbehave(run_config, step, reply, worker) -> reply`, if given,
  rewrites each run's reply (a dict with the run's `name`) before it
  leaves (tests of the server's gate)."""
  app = ClientApp()

  @app.train()
  def train(msg: Message, context: Context):
    content = {}
    for name, (spec, data, hyper) in _runs(make_run,
                                           context.run_config).items():
      if f'{name}.round' not in msg.content:
        continue
      round_ = msg.content[f'{name}.round']
      worker = int(round_['worker'])
      client = deploy.Client(spec, data, hyper, worker)
      _load(context, name, client)
      theta = (msg.content[f'{name}.theta'].to_numpy_ndarrays()[0]
               if f'{name}.theta' in msg.content else None)
      down = (msg.content[f'{name}.down'] if f'{name}.down' in msg.content
              else {'rounds': [], 'payloads': []})
      message = deploy.Message(
          int(round_['step']), theta,
          np.asarray(round_['history'], np.float32),
          int(round_['last-taken']),
          tuple(zip((int(j) for j in down['rounds']), down['payloads'])))
      upload = client.round(message)
      _save(context, name, client)
      fmt = upload.format or client.format  # (the warm start's first: identity)
      reply = {'sent': upload.sent,
               'compressor': fmt.compressor, 'bits': upload.bits,
               **{f'format.{n}': v for n, v in fmt.values.items()}}
      if upload.sent:
        reply['payload'] = upload.payload
      if misbehave is not None:
        reply = misbehave(dict(context.run_config), message.step,
                          dict(reply, name=name), worker)
        reply.pop('name', None)
      # when the upload leaves (the server's clock: the same host's)
      reply['sent-at'] = time.time()
      content[f'{name}.upload'] = ConfigRecord(reply)
    return Message(RecordDict(content), reply_to=msg)

  return app


# --- the server --------------------------------------------------------------


def _check_format(server: deploy.Server, worker: int, reply) -> None:
  fmt = server.format_for(worker)  # (the warm start's first: identity)
  if not reply.get('sent'):
    fmt = server.format  # (a skip names the run's)
  if reply.get('compressor') != fmt.compressor:
    raise wire.WireError(f'compressor {reply.get("compressor")!r}: the run '
                         f'sends {fmt.compressor!r}')
  for name, value in fmt.values.items():  # b, s, k: the codec's values
    if reply.get(f'format.{name}') != value:
      raise wire.WireError(f'format value {name}='
                           f'{reply.get(f"format.{name}")!r} (the run\'s '
                           f'{value})')
  if reply.get('sent') and 'payload' in reply:
    bits = int(reply.get('bits', -1))
    if fmt.fixed_bits() is not None and bits != fmt.fixed_bits():
      raise wire.WireError(f'{bits} bits counted: the format sends '
                           f'{fmt.fixed_bits()}')


def _exchange(grid: Grid, messages, timeout: float, poll_s: float = 0.1):
  """grid.send_and_receive, polling every `poll_s` (Flower's polls every
  3 s), with each reply's arrival time (time.time()): (replies, {id(reply):
  arrival})."""
  pending = set(grid.push_messages(messages))
  replies, arrived = [], {}
  end = time.monotonic() + timeout
  while pending and time.monotonic() < end:
    got = list(grid.pull_messages(pending))
    now = time.time()
    for reply in got:
      arrived[id(reply)] = now
      pending.discard(reply.metadata.reply_to_message_id)
    replies.extend(got)
    if pending:
      time.sleep(poll_s)
  return replies, arrived


class _Served:
  """One named run on the server: its deploy.Server and its record."""

  def __init__(self, name, spec, data, hyper):
    self.name = name
    counts = None if data.count_M is None else np.asarray(data.count_M)
    self.server = deploy.Server(spec, hyper, counts)
    self.rounds, self.refusals = [], []

  def refuse(self, k, worker, reason):
    log.warning('round %d: refused client %s%s: %s', k, worker,
                '' if self.name == 'run' else f' ({self.name})', reason)
    self.server.refuse(worker, reason)
    self.refusals.append({'round': k, 'client': worker, 'reason': reason})


def serve(grid: Grid, make_run: MakeRun, run_config: dict) -> dict:
  """Runs `run_config['rounds']` rounds of every run `make_run` names, side
  by side (one message per client and round carries them all), with the
  clients on `grid` (waiting up to `run_config['wait-s']` for
  `run_config['clients']` of them); returns (and writes to
  run_config['out'], if set) the record: {run name: its rounds, refusals
  and final parameters}."""
  runs = _runs(make_run, run_config)
  served = [_Served(name, *run) for name, run in runs.items()]
  num_workers = {s.server.spec.num_workers for s in served}
  if len(num_workers) != 1:
    raise ValueError(f'the runs have {sorted(num_workers)} workers: one '
                     'deployment serves runs of the same clients')
  rounds = int(run_config.get('rounds', 20))
  timeout = float(run_config.get('round-timeout-s', 120))
  # The first round's clients compile their program (a cold compilation
  # cache): it waits longer, `first-round-timeout-s` (default the larger of
  # the round timeout and FIRST_ROUND_TIMEOUT_S).
  first_timeout = float(run_config.get('first-round-timeout-s',
                                       max(timeout, FIRST_ROUND_TIMEOUT_S)))
  num_workers = num_workers.pop()
  wanted = int(run_config.get('clients', num_workers))
  if wanted != num_workers:
    raise ValueError(f'clients={wanted}: the runs have {num_workers} '
                     'workers, one a node')
  deadline = time.monotonic() + float(run_config.get('wait-s', 120))
  nodes = list(grid.get_node_ids())
  while len(nodes) < wanted and time.monotonic() < deadline:
    time.sleep(0.5)
    nodes = list(grid.get_node_ids())
  if len(nodes) < wanted:
    raise RuntimeError(f'{len(nodes)} of {wanted} clients connected')
  # The clients are the transport's nodes, numbered by the server: a reply
  # is its node's (Flower's SuperLink sets its source), never what it says.
  nodes = sorted(nodes)
  if len(nodes) > wanted:
    log.warning('%d nodes connected: serving the first %d by node id',
                len(nodes), wanted)
    nodes = nodes[:wanted]
  worker_of = {node: w for w, node in enumerate(nodes)}
  start = time.perf_counter()
  for k in range(rounds):
    messages = []
    for node in nodes:
      w = worker_of[node]
      content = {}
      for s in served:
        msg = s.server.broadcast(w)
        if msg.theta_P is not None:
          content[f'{s.name}.theta'] = ArrayRecord(
              [np.asarray(msg.theta_P, np.float32)])
        if msg.downlinks:  # (a broadcast with a wire: EF21-BC's)
          content[f'{s.name}.down'] = ConfigRecord({
              'rounds': [j for j, _ in msg.downlinks],
              'payloads': [bytes(b) for _, b in msg.downlinks]})
        content[f'{s.name}.round'] = ConfigRecord({
            'step': k, 'worker': w,
            'history': [float(h) for h in msg.history_D],
            'last-taken': msg.last_taken})
      messages.append(Message(content=RecordDict(content), dst_node_id=node,
                              message_type='train'))
    down_bytes = _message_bytes(messages[0].content)
    round_start = time.perf_counter()
    waits = first_timeout if k == 0 else timeout
    replies, arrived = _exchange(grid, messages, waits)
    wall = time.perf_counter() - round_start
    per_client = {s.name: {} for s in served}
    heard_nodes = set()
    for reply in replies:
      node = reply.metadata.src_node_id
      w = worker_of.get(node)
      if w is None:
        log.warning('round %d: a reply from node %s, which this run does '
                    'not serve, ignored', k, node)
        continue
      if node in heard_nodes:  # (its first answer is not taken either)
        for s in served:
          per_client[s.name].pop(w, None)
          s.refuse(k, w, f'client {w} answered round {k} twice')
        continue
      heard_nodes.add(node)
      if reply.has_error():
        for s in served:
          s.refuse(k, w, f'error reply: {reply.error.reason}')
        continue
      for s in served:
        try:
          up = reply.content[f'{s.name}.upload']
          _check_format(s.server, w, up)
          payload = up.get('payload')
          s.server.receive(w, bool(up.get('sent')), payload,
                           up.get('bits') if up.get('sent') else None)
          per_client[s.name][w] = {
              'sent': bool(up.get('sent')), 'bits': int(up.get('bits', 0)),
              'payload_bytes': len(payload) if payload else 0,
              'message_bytes': _message_bytes(RecordDict(
                  {f'{s.name}.upload': up})),
              # from the reply leaving the ClientApp to the server holding
              # it (through the SuperNode and the link)
              'upload_s': arrived[id(reply)] - float(up.get('sent-at', 0.0))}
        except (wire.WireError, KeyError, TypeError, ValueError) as e:
          s.refuse(k, w, str(e))
    for s in served:
      for node, w in worker_of.items():
        if node not in heard_nodes:
          log.warning('round %d: client %d absent%s (no reply in %g s)', k,
                      w, '' if s.name == 'run' else f' ({s.name})', waits)
          s.refusals.append({'round': k, 'client': w, 'reason': 'no reply'})
      taken = s.server.finish_round()
      s.rounds.append({'round': k, 'wall_s': wall,
                       'down_message_bytes': down_bytes,
                       'clients': {str(w): c for w, c in
                                   sorted(per_client[s.name].items())},
                       'taken': [bool(t) for t in taken]})
  wall_s = time.perf_counter() - start
  record = {s.name: {'rounds': s.rounds, 'refusals': s.refusals,
                     'wall_s': wall_s,
                     'theta': np.asarray(s.server.theta_P).tolist(),
                     'num_params': int(s.server.format.num_params),
                     'compressor': s.server.format.compressor}
            for s in served}
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
