"""Unit tests of the profiles' plans."""

from __future__ import annotations

from faults.profiles import SHORT, long_profile
from faults.scenarios import SCENARIOS


def test_the_short_profile_runs_every_scenario_and_kills_the_broker_twice() -> None:
    assert set(SHORT.plan) == set(SCENARIOS)
    assert [name for name in SHORT.plan if SHORT.plan.count(name) > 1] == ["broker-kill"] * 2
    assert SHORT.second_writer


def test_the_long_profile_has_its_kill_cycles_and_every_fault() -> None:
    profile = long_profile(20)
    assert profile.kill_cycles() == 20
    assert set(profile.plan) == set(SCENARIOS)
    assert profile.plan[-2:] == ("fuzz", "poison-record")
    assert long_profile(3).kill_cycles() == 3
