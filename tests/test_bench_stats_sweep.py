"""The sweep-gate statistics rows: no true effect, one family for the sweep against a gate per member."""

from __future__ import annotations

import math

from voxledger.bench_sections.stats_sweep import sweep_gate_rows

REPS = 60
LEVEL = 2.5  # one-sided familywise level of the policy's 95% confidence, in percent


def test_one_family_holds_the_sweep_at_its_level_where_a_gate_per_member_does_not() -> None:
    rows = sweep_gate_rows(REPS, seed=41)
    slack = 200 * math.sqrt(LEVEL / 100 * (1 - LEVEL / 100) / REPS)  # two standard errors of a rate of 2.5% over REPS sweeps
    assert len(rows) == 4  # 4 and 8 members, each: one family, a gate per member
    for family, per_member in (rows[0:2], rows[2:4]):
        assert "one family" in family.name and "a gate per member" in per_member.name
        assert family.value <= LEVEL + slack, family  # at or below (1 - 0.95) / 2, within simulation error
        assert per_member.value > family.value  # judged one member at a time, the sweep promotes noise more often
