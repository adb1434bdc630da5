"""Differential privacy (docs/algorithm.md, "Differential privacy"): the
accounting on the host (`accounting`: dp-accounting's events, accountants
and calibration) and local mode's participation counts (`participations`).
"""

from laq_jax.privacy.accounting import (ACCOUNTANTS, CALIBRATION_STEP,
                                        CLASSIC_ORDERS, MODES, Privacy,
                                        accountant_name, adjacency,
                                        calibrate, check, classic_epsilon,
                                        composed, epsilon, new_accountant,
                                        relation, round_event)
from laq_jax.privacy.participations import most_participations

__all__ = ['ACCOUNTANTS', 'CALIBRATION_STEP', 'CLASSIC_ORDERS', 'MODES',
           'Privacy', 'accountant_name', 'adjacency', 'calibrate', 'check',
           'classic_epsilon', 'composed', 'epsilon', 'most_participations',
           'new_accountant', 'relation', 'round_event']
