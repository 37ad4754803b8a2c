"""Hearing: when each worker was heard, in which order, and up to when silence counts."""

from __future__ import annotations

from consumers.fleet.hearing import Hearing
from tests.unit.consumers.fleet.test_router import Clock


def test_silence_counts_up_to_the_last_read_and_the_read_order_is_kept() -> None:
    clock = Clock()
    hearing = Hearing(clock)
    assert hearing.view_age_s() is None and hearing.order("w0") == 0
    hearing.heard("w0")
    clock.t = 1.0
    hearing.heard("w1")
    assert hearing.order("w0") < hearing.order("w1")
    assert hearing.silent_ms("w0") == 1000  # no view marks it: up to now
    hearing.mark_current()
    clock.t = 9.0  # the process stalled: nothing read since 1.0
    assert hearing.silent_ms("w0") == 1000 and hearing.view_age_s() == 8.0
    hearing.mark_current(lag_s=2.0)  # read, the broker's last answer of 7.0
    hearing.mark_current(lag_s=5.0)  # an older answer read later moves nothing back
    assert hearing.silent_ms("w0") == 7000 and hearing.view_age_s() == 2.0
    hearing.forget("w0")
    assert hearing.order("w0") == 0
