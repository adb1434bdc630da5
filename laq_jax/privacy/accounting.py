"""Differential privacy's accounting, on the host (the contract's B.3).

    privacy = Privacy('central', noise_multiplier=1.546, delta=1e-5)
    eps = epsilon(privacy, rounds=500, num_clients=1000, participation=0.1)
    z = calibrate(privacy, 8.0, rounds=500, num_clients=1000,
                  participation=0.1)

Client-level (epsilon, delta)-DP of the released models theta^1..theta^T,
computed with Google's `dp-accounting` (0.6.0) from the DpEvent of one
round, self-composed over the rounds:

| mode, sampling | one round's event | accountant | adjacency |
|---|---|---|---|
| central, distributed; participation q | Poisson(q, Gaussian(z)) | PLD (add/remove) | add/remove one client |
| central, distributed; clients_per_round S | WOR(M, S, Gaussian(z/2)) | RDP (replace one) | replace one client |
| central + private trigger; q | Poisson(q, Gaussian(z_eff)) | PLD | zero-out one client |
| local | Gaussian(z_l/2) per participation, no amplification | PLD (add/remove) | replace the client's data |

z_eff = (z^-2 + z_t^-2)^(-1/2), z_t = r z (the trigger's test released
beside the sum share: one Gaussian mechanism). A multiplier is the noise's
std over the l2-sensitivity of what is released: a replace-one neighbour
moves a sum by 2 C, so the multiplier is halved here, never by the
accountant (PLD's REPLACE_ONE on a plain Gaussian doubles the sensitivity
itself, RDP ignores the relation). `accountant='rdp'` switches the Poisson
rows to the RDP accountant (a cross-check); fixed S is always RDP (PLD has
no sampling without replacement).

`classic_epsilon` is TF Privacy's conversion (epsilon = min over orders of
RDP(alpha) + ln(1/delta) / (alpha - 1)), which the published tables used.
Everything here runs on the host, in NumPy and dp-accounting, outside any
compiled program (local mode's n_max(k), which re-draws the participation
stream with JAX, is `laq_jax.privacy.participations`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings

from absl import logging
import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp
import numpy as np

from laq_jax.show import show

MODES = ('off', 'central', 'distributed', 'local')
ACCOUNTANTS = ('pld', 'rdp')
# TF Privacy's orders (tutorials/README.md's table): 1.1..10.9, 12..63.
CLASSIC_ORDERS = tuple(round(1 + x / 10, 1) for x in range(1, 100)) + tuple(
    range(12, 64))
# A calibrated multiplier is rounded up to this (its epsilon recomputed).
CALIBRATION_STEP = 1e-4


@dataclasses.dataclass(frozen=True)
class Privacy:
  """The dp group's settings that the accounting reads (the contract's B.5).

  Attributes:
    mode: off, central, distributed or local.
    noise_multiplier: z (z_l in local mode), the noise's std over the clip
      norm C_dp.
    delta: the delta of (epsilon, delta); refused at or above 1/M.
    accountant: pld or rdp (rdp: a cross-check; fixed S is always rdp).
    private_trigger: central mode's privatized skip test (Poisson only).
    trigger_noise_ratio: r = z_t / z, the test's multiplier over the sum's.
  """
  mode: str = 'off'
  noise_multiplier: float = 0.0
  delta: float = 1e-5
  accountant: str = 'pld'
  private_trigger: bool = False
  trigger_noise_ratio: float = 3.0

  def __post_init__(self):
    def refuse(name, allowed):
      raise ValueError(f'dp.{name}={show(getattr(self, name))} is not '
                       f'allowed: it must be {allowed}')
    if self.mode not in MODES:
      refuse('mode', 'one of ' + ', '.join(map(repr, MODES)))
    if self.accountant not in ACCOUNTANTS:
      refuse('accountant', 'one of ' + ', '.join(map(repr, ACCOUNTANTS)))
    if self.mode != 'off' and not _positive(self.noise_multiplier):
      refuse('noise_multiplier', 'a finite number > 0')
    if self.mode == 'off' and not (_positive(self.noise_multiplier)
                                   or self.noise_multiplier == 0):
      refuse('noise_multiplier', 'a finite number >= 0')
    if not (_positive(self.delta) and self.delta < 1):
      refuse('delta', 'a number in (0, 1)')
    if not isinstance(self.private_trigger, (bool, np.bool_)):
      refuse('private_trigger', 'True or False')
    if not _positive(self.trigger_noise_ratio):
      refuse('trigger_noise_ratio', 'a finite number > 0')
    if self.private_trigger and self.mode != 'central':
      raise ValueError(f'dp.private_trigger=True is not allowed with '
                       f'dp.mode={self.mode!r}: the privatized test is '
                       "central mode's (use dp.mode='central')")

  def replace(self, **changes) -> 'Privacy':
    return dataclasses.replace(self, **changes)


def _positive(x) -> bool:
  return (isinstance(x, (int, float, np.integer, np.floating))
          and not isinstance(x, (bool, np.bool_)) and math.isfinite(x)
          and x > 0)


def _integer(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(
      x, (bool, np.bool_))


@contextlib.contextmanager
def _quiet():
  """dp-accounting's RDP drops orders that fail to converge with a warning
  through absl's log (the bound stays valid): silenced here."""
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      yield
  finally:
    logging.set_verbosity(verbosity)


def _sampling(num_clients: int, participation: float,
              clients_per_round: int) -> tuple[bool, float]:
  """(fixed size?, q or S / M), checked."""
  if not (_integer(num_clients) and num_clients >= 1):
    raise ValueError(f'num_clients={show(num_clients)} is not allowed: it '
                     'must be an integer >= 1')
  if not _integer(clients_per_round) or clients_per_round:
    if not (_integer(clients_per_round)
            and 1 <= clients_per_round <= num_clients):
      raise ValueError(f'clients_per_round={show(clients_per_round)} is not '
                       f'allowed: it must be in 1..{num_clients} (or 0)')
    return True, clients_per_round / num_clients
  if not (_positive(participation) and participation <= 1):
    raise ValueError(f'participation={show(participation)} is not allowed: '
                     'it must be in (0, 1]')
  return False, float(participation)


def check(privacy: Privacy, *, num_clients: int, participation: float = 1.0,
          clients_per_round: int = 0) -> None:
  """The refusals that need the run's clients (B.5, B.6): delta >= 1/M, a
  distributed mode without a fixed round size, a private trigger under
  fixed S. ValueError naming the field and the sound option."""
  fixed, _ = _sampling(num_clients, participation, clients_per_round)
  if privacy.mode == 'off':
    return
  if privacy.delta >= 1 / num_clients:
    raise ValueError(f'dp.delta={privacy.delta!r} is not allowed: it must be '
                     f'below 1/M = {1 / num_clients:.3g} (M = {num_clients} '
                     'clients; a delta of 1/M could release one client\'s '
                     'data outright)')
  if privacy.mode == 'distributed' and not fixed:
    raise ValueError('dp.mode=distributed needs clients_per_round S > 0: '
                     'each of S participants adds 1/S of the noise (under '
                     'Poisson sampling a round without participants adds '
                     'none); use clients_per_round, or dp.mode=central')
  if privacy.private_trigger and fixed:
    raise ValueError('dp.private_trigger=True needs Poisson sampling '
                     '(participation q, clients_per_round=0): its '
                     'accounting is the Poisson row')


def round_event(privacy: Privacy, *, num_clients: int,
                participation: float = 1.0,
                clients_per_round: int = 0) -> dp_accounting.DpEvent:
  """One round's DpEvent (the table above): for local mode, one
  participation's."""
  check(privacy, num_clients=num_clients, participation=participation,
        clients_per_round=clients_per_round)
  if privacy.mode == 'off':
    return dp_accounting.NonPrivateDpEvent()
  z = float(privacy.noise_multiplier)
  if privacy.mode == 'local':
    return dp_accounting.GaussianDpEvent(z / 2)
  fixed, q = _sampling(num_clients, participation, clients_per_round)
  if fixed:
    return dp_accounting.SampledWithoutReplacementDpEvent(
        num_clients, clients_per_round, dp_accounting.GaussianDpEvent(z / 2))
  if privacy.private_trigger:
    z_t = privacy.trigger_noise_ratio * z
    z = (z ** -2 + z_t ** -2) ** -0.5
  return dp_accounting.PoissonSampledDpEvent(q,
                                             dp_accounting.GaussianDpEvent(z))


def accountant_name(privacy: Privacy, *, clients_per_round: int = 0) -> str:
  """pld or rdp: the one that accounts the run (fixed S: rdp; else the
  setting's, pld by default)."""
  if privacy.mode in ('central', 'distributed') and clients_per_round:
    return 'rdp'
  return privacy.accountant


def adjacency(privacy: Privacy, *, clients_per_round: int = 0) -> str:
  """What a neighbouring dataset is, in words (the table above)."""
  if privacy.mode == 'off':
    return 'none (no privacy)'
  if privacy.mode == 'local':
    return "replace the client's data"
  if clients_per_round:
    return 'replace one client'
  return 'zero-out one client' if privacy.private_trigger else \
      'add/remove one client'


def relation(privacy: Privacy, *, clients_per_round: int = 0
             ) -> dp_accounting.NeighboringRelation:
  """The accountant's neighbouring relation: replace one under fixed S
  (sampling without replacement), zero-out (REPLACE_SPECIAL) for the
  private trigger's row, else add/remove one."""
  relations = dp_accounting.NeighboringRelation
  if privacy.mode in ('central', 'distributed') and clients_per_round:
    return relations.REPLACE_ONE
  if privacy.private_trigger:
    return relations.REPLACE_SPECIAL
  return relations.ADD_OR_REMOVE_ONE


def new_accountant(privacy: Privacy, *, clients_per_round: int = 0):
  """A fresh accountant for the run (its name and relation above)."""
  rel = relation(privacy, clients_per_round=clients_per_round)
  if accountant_name(privacy, clients_per_round=clients_per_round) == 'rdp':
    return rdp.RdpAccountant(neighboring_relation=rel)
  return pld.PLDAccountant(rel)


def composed(privacy: Privacy, rounds: int, *, num_clients: int,
             participation: float = 1.0, clients_per_round: int = 0,
             participations: int | None = None) -> dp_accounting.DpEvent:
  """The event of `rounds` rounds (local mode: of `participations`, the
  most rounds any client took part in; default every round)."""
  event = round_event(privacy, num_clients=num_clients,
                      participation=participation,
                      clients_per_round=clients_per_round)
  return dp_accounting.SelfComposedDpEvent(
      event, _count(privacy, rounds, participations))


def _count(privacy: Privacy, rounds: int, participations: int | None) -> int:
  """How many times one round's event composes: the rounds, or in local
  mode a client's participations (0..rounds; default every round)."""
  if not (_integer(rounds) and rounds >= 0):
    raise ValueError(f'rounds={show(rounds)} is not allowed: it must be an '
                     'integer >= 0')
  if privacy.mode != 'local' or participations is None:
    return int(rounds)
  if not (_integer(participations) and 0 <= participations <= rounds):
    raise ValueError(f'participations={show(participations)} is not '
                     f'allowed: it must be an integer in 0..{rounds} (the '
                     'rounds)')
  return int(participations)


def epsilon(privacy: Privacy, rounds: int, *, num_clients: int,
            participation: float = 1.0, clients_per_round: int = 0,
            participations: int | None = None) -> float:
  """epsilon at `privacy.delta` after `rounds` rounds (0.0 for none; inf
  with mode off)."""
  event = composed(privacy, rounds, num_clients=num_clients,
                   participation=participation,
                   clients_per_round=clients_per_round,
                   participations=participations)
  if privacy.mode == 'off':
    return math.inf
  if event.count == 0:  # nothing released yet
    return 0.0
  with _quiet():
    return float(new_accountant(
        privacy, clients_per_round=clients_per_round).compose(
            event).get_epsilon(privacy.delta))


def calibrate(privacy: Privacy, target_epsilon: float, rounds: int, *,
              num_clients: int, participation: float = 1.0,
              clients_per_round: int = 0,
              participations: int | None = None) -> tuple[float, float]:
  """(z, epsilon): a noise multiplier whose epsilon after `rounds` rounds
  is at most `target_epsilon`, within tolerance CALIBRATION_STEP of the
  smallest (dp-accounting's `calibrate_dp_mechanism`) and rounded up to a
  multiple of it, and that epsilon recomputed. Local mode calibrates z_l,
  a private trigger z with z_t = r z."""
  if not _positive(target_epsilon):
    raise ValueError(f'dp.target_epsilon={show(target_epsilon)} is not '
                     'allowed: it must be a finite number > 0')
  if privacy.mode == 'off':
    raise ValueError("dp.target_epsilon is set with dp.mode='off': choose "
                     'central, distributed or local')
  def event(z):
    if z <= 0:  # (the default bracket's lower end: no noise, no privacy)
      return dp_accounting.NonPrivateDpEvent()
    return composed(privacy.replace(noise_multiplier=float(z)), rounds,
                    num_clients=num_clients, participation=participation,
                    clients_per_round=clients_per_round,
                    participations=participations)

  if _count(privacy, rounds, participations) == 0:
    raise ValueError(f'dp.target_epsilon={target_epsilon!r} over no '
                     'release (0 rounds or participations): nothing to '
                     'calibrate')
  with _quiet():
    z = dp_accounting.calibrate_dp_mechanism(
        lambda: new_accountant(privacy, clients_per_round=clients_per_round),
        event, target_epsilon, privacy.delta, tol=CALIBRATION_STEP)
  z = math.ceil(round(z / CALIBRATION_STEP, 6)) * CALIBRATION_STEP
  z = round(z, 4)
  eps = epsilon(privacy.replace(noise_multiplier=z), rounds,
                num_clients=num_clients, participation=participation,
                clients_per_round=clients_per_round,
                participations=participations)
  return z, eps


def classic_epsilon(event: dp_accounting.DpEvent, delta: float,
                    orders=CLASSIC_ORDERS) -> float:
  """TF Privacy's conversion of RDP to (epsilon, delta): min over `orders`
  of RDP(alpha) + ln(1/delta) / (alpha - 1), RDP(alpha) recovered from
  dp-accounting's one-order epsilon (which uses the tighter conversion
  epsilon_alpha = RDP(alpha) + ln(1 - 1/alpha) - ln(delta alpha) /
  (alpha - 1)); orders whose bound is 0 or infinite are skipped."""
  best = math.inf
  with _quiet():
    for alpha in orders:
      eps_alpha = rdp.RdpAccountant(orders=[alpha]).compose(
          event).get_epsilon(delta)
      if eps_alpha == 0 or not math.isfinite(eps_alpha):
        continue
      rdp_alpha = (eps_alpha - math.log(1 - 1 / alpha)
                   + math.log(delta * alpha) / (alpha - 1))
      best = min(best, rdp_alpha + math.log(1 / delta) / (alpha - 1))
  return best
