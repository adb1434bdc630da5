"""One round split where a deployment splits it: the worker's half on the
worker, the server's half on the server, each from the library's own
functions, so a deployed run is the simulated one. ::

    client = deploy.Client(spec, data, hyper, worker=m)   # on worker m
    server = deploy.Server(spec, hyper, counts_M)         # on the server
    message = server.broadcast(m)               # theta^k, k, the history
    upload = client.round(message)              # its memory moves on
    server.receive(m, upload.sent, upload.payload, upload.bits)  # or WireError
    server.finish_round()                       # aggregate, step, history

The worker's half is `stages.gradient_part` on its own shard (its gradient, or
its K local steps) and `rules.workers_stage` on its own memory (its
compressor, error feedback, its trigger): the simulation's stages on one
row. The server's half is the rest of `rules.step`: the aggregate of the
uploads as decoded from their payloads (`laq_jax.wire`), the participants'
weighted mean, the server's update (`laq_jax.servers`), the history the
trigger reads. Every client of the round that the server heard from takes
part; one it did not hear from, or whose payload it refused, is absent for
the round (as `participation.mask_absent` treats a client not drawn: it
keeps its memory, its clock counts on), and the next message tells it so.

Deployable: the presets whose compressor has a wire format (`wire.FORMATS`:
gd, lag, laq, qgd, sgd, slag, slaq, sqgd, qsgd, ef21, topk_ef, fedavg,
fedavgm, fedadam, fedyogi, fedprox, fedpaq, fedlaq, local_sgd, the 3PC
family's tpc_ef21, tpc_lag and tpc_clag, whose warm start sends a worker's
first upload, g itself, in the identity format: `warm_format`,
`Server.format_for`, ...), and those whose parts declare a wire for what
is not one compressed difference: MARINA's, 3PC v2's, 3PC v4's, DASHA's
and DASHA-MVR's uploads travel in segments (their estimators'
`codecs.Uplink`, run by `laq_jax.deploy.uplink`: g on MARINA's coin rounds,
else Rand-K of g - y, its mask drawn from the compressor key on both sides;
3PC v2's Rand-K then top-k; 3PC v4's two top-k; DASHA's Rand-K), and
EF21-BC's broadcast is the server's top_k_down payload of
agg - G, from which each client steps its own theta (the broadcast's
`codecs.Downlink`: `Message.downlinks`, `Held`). All in float32, without
the authors' bit counts, a quantized broadcast, control variates
(SCAFFOLD), or a server that selects workers (LASG-PS). Every
client the server reaches takes part in every round (a participation draw
is the engine's: Flower samples its nodes).
"""
from __future__ import annotations

from laq_jax.deploy.common import (WIRE_ESTIMATORS, Held, Memory, Message,
                                   Upload, check_deployable, downlink_wire,
                                   uplink_part, warm_format)
from laq_jax.deploy.client import Client
from laq_jax.deploy.server import Refusal, Server

__all__ = ['Client', 'Held', 'Memory', 'Message', 'Refusal', 'Server',
           'Upload', 'WIRE_ESTIMATORS', 'check_deployable', 'downlink_wire',
           'uplink_part', 'warm_format']
