"""Usage counting: one entry per request, months in UTC, tenants apart, totals = the ledger."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from consumers.aggregator.usage import (
    Entry,
    Totals,
    decode_entry,
    encode_entry,
    entry_for,
    expired,
    key_partition,
    ledger_key,
    merge_entry,
    result_month,
)
from topics.events import AudioRef, ErrorInfo, Status, SynthesisResult

NOW = datetime(2031, 3, 15, 12, 0, tzinfo=UTC)


def result(rid: str, duration: float = 2.0, *, status: Status = "succeeded",
           tenant: str | None = None, rtf: float | None = 0.25,
           completed_at: str = "2031-03-10T08:00:00.000Z", attempt: int = 1) -> SynthesisResult:
    audio = AudioRef(bucket="b", key=f"audio/{rid}.wav", url="http://x", format="wav",
                     sample_rate=22050, duration_s=duration, bytes=10, sha256="0" * 64)
    ok = status == "succeeded"
    return SynthesisResult(request_id=rid, voice_id="v", status=status, completed_at=completed_at,
                           audio=audio if ok else None, tenant=tenant, rtf=rtf if ok else None,
                           error=None if ok else ErrorInfo(code="engine_error", message="x"),
                           attempt=attempt)


class Ledger:
    """The meter's counting path over a dict instead of a faust table."""

    def __init__(self) -> None:
        self.table: dict[bytes, bytes] = {}
        self.totals = Totals()

    def count(self, r: SynthesisResult, partition: int = 0) -> str:
        entry, outcome = entry_for(r, NOW)
        if entry is None:
            return outcome
        key = ledger_key(partition, entry.tenant, r.request_id)
        old = decode_entry(self.table[key]) if key in self.table else None
        merged, outcome = merge_entry(old, entry)
        if merged is not None:
            self.table[key] = encode_entry(merged)
            self.totals.apply(partition, old, merged)
        return outcome

    def sums(self) -> dict[tuple[int, str, str], tuple[float, float, int]]:
        return {b: s.rounded() for b, s in self.totals.buckets.items()}


def test_a_result_delivered_three_times_is_counted_once() -> None:
    ledger = Ledger()
    first = result("r1", 3.5)
    assert [ledger.count(first), ledger.count(first), ledger.count(result("r1", 3.5,
                                                                          attempt=2))] \
        == ["counted", "duplicate", "duplicate"]
    assert ledger.sums() == {(0, "default", "2031-03"): (3.5, 0.875, 1)}


def test_the_first_success_wins_even_if_a_retry_reports_another_duration() -> None:
    ledger = Ledger()
    ledger.count(result("r1", 2.0))
    assert ledger.count(result("r1", 9.0)) == "duplicate"
    assert ledger.sums()[(0, "default", "2031-03")][0] == 2.0


def test_failures_and_cancels_count_nothing_and_a_later_success_counts() -> None:
    ledger = Ledger()
    assert ledger.count(result("r1", status="failed")) == "not_counted"
    assert ledger.count(result("r1", status="cancelled")) == "not_counted"
    assert ledger.sums() == {}
    assert ledger.count(result("r1", 1.5)) == "counted"
    assert ledger.sums() == {(0, "default", "2031-03"): (1.5, 0.375, 1)}


def test_engine_seconds_missing_from_the_first_copy_come_from_a_later_one() -> None:
    # A redelivery answered from the stored object carries no rtf; the synthesized copy does.
    ledger = Ledger()
    assert ledger.count(result("r1", 4.0, rtf=None)) == "counted"
    assert ledger.sums()[(0, "default", "2031-03")] == (4.0, 0.0, 1)
    assert ledger.count(result("r1", 4.0, rtf=0.5)) == "engine_added"
    assert ledger.count(result("r1", 4.0, rtf=0.9)) == "duplicate"
    assert ledger.sums()[(0, "default", "2031-03")] == (4.0, 2.0, 1)


def test_a_batchs_engine_time_is_shared_by_audio_not_counted_per_request() -> None:
    # A batch of 3 took 1.2 s of engine time for 6 s of audio: rtf 0.2 on every result.
    ledger = Ledger()
    for rid, duration in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        ledger.count(result(rid, duration, rtf=0.2))
    audio, engine, n = ledger.sums()[(0, "default", "2031-03")]
    assert (audio, engine, n) == (6.0, 1.2, 3)


def test_tenants_are_apart_even_with_the_same_request_id() -> None:
    ledger = Ledger()
    for tenant in (None, "default", "acme", "rival"):
        ledger.count(result("same-id", 1.0, tenant=tenant))
    assert ledger.sums() == {(0, "default", "2031-03"): (1.0, 0.25, 1),
                             (0, "acme", "2031-03"): (1.0, 0.25, 1),
                             (0, "rival", "2031-03"): (1.0, 0.25, 1)}


def test_months_are_utc_calendar_months_of_completed_at() -> None:
    ledger = Ledger()
    ledger.count(result("late-feb", completed_at="2031-02-28T23:59:59.999Z"))
    ledger.count(result("march", completed_at="2031-03-01T00:00:00.000Z"))
    # 01:30 on March 1st in UTC+02:00 is still February in UTC
    ledger.count(result("tz", completed_at="2031-03-01T01:30:00+02:00"))
    assert set(ledger.sums()) == {(0, "default", "2031-02"), (0, "default", "2031-03")}
    assert ledger.sums()[(0, "default", "2031-02")][2] == 2
    assert result_month("not a time", NOW) == "2031-03"


def test_a_duplicate_in_a_new_month_stays_in_the_first_copys_month() -> None:
    ledger = Ledger()
    ledger.count(result("r1", completed_at="2031-01-31T23:59:58Z"))
    ledger.count(result("r1", completed_at="2031-02-01T00:00:03Z"))
    assert list(ledger.sums()) == [(0, "default", "2031-01")]


@pytest.mark.parametrize("bad", [
    result("r1", float("nan")), result("r1", -1.0), result("r1", 1e9),
    result("r1", tenant="no/slash"), result("../etc")])
def test_unusable_results_are_invalid_not_counted(bad: SynthesisResult) -> None:
    ledger = Ledger()
    assert ledger.count(bad) == "invalid"
    assert ledger.sums() == {}


def test_an_absurd_rtf_keeps_the_audio_and_drops_the_engine_seconds() -> None:
    entry, outcome = entry_for(result("r1", 2.0, rtf=float("inf")), NOW)
    assert outcome == "counted" and entry is not None
    assert entry.audio_s == 2.0 and entry.engine_s is None


def test_ledger_keys_name_their_partition_and_keep_tenants_apart() -> None:
    assert ledger_key(7, "default", "r1") == b"7|r1"
    assert ledger_key(7, "acme", "r1") == b"7|acme/r1"
    assert key_partition(b"11|acme/r1") == 11
    with pytest.raises(ValueError):
        key_partition(b"acme/r1")


def test_totals_rebuilt_from_the_ledger_equal_the_incremental_ones() -> None:
    rng = random.Random(21)
    ledger = Ledger()
    expected: dict[tuple[str, str], float] = {}
    for _ in range(400):
        rid = f"r{rng.randrange(150)}"
        tenant = rng.choice([None, "acme", "rival"])
        month = rng.choice(["2031-01", "2031-02"])
        duration = round(rng.uniform(0.5, 5.0), 3)
        r = result(rid, duration, tenant=tenant, completed_at=f"{month}-05T00:00:00Z",
                   rtf=rng.choice([None, 0.1, 0.3]))
        if ledger.count(r, partition=int(rid[1:]) % 3) == "counted":
            key = (tenant or "default", month)
            expected[key] = expected.get(key, 0.0) + duration
    rebuilt = Totals()
    assert rebuilt.rebuild([*ledger.table.items(), (b"junk", b"{}")]) == len(ledger.table)
    assert {b: s.rounded() for b, s in rebuilt.buckets.items()} == ledger.sums()
    by_tenant_month: dict[tuple[str, str], float] = {}
    for (_, tenant, month), sums in ledger.totals.buckets.items():
        by_tenant_month[(tenant, month)] = by_tenant_month.get((tenant, month), 0.0) + \
            sums.audio_s
    assert by_tenant_month.keys() == expected.keys()
    for key, value in expected.items():
        assert by_tenant_month[key] == pytest.approx(value)


def test_removing_every_entry_leaves_no_bucket_behind() -> None:
    totals = Totals()
    entry = Entry(tenant="acme", month="2031-01", audio_s=0.1, engine_s=0.2)
    totals.apply(3, None, entry)
    totals.apply(3, entry, None)
    assert totals.buckets == {}


def test_a_month_expires_only_after_the_horizon_past_its_end() -> None:
    day = 86400.0
    assert not expired("2031-02", datetime(2031, 3, 8, 23, tzinfo=UTC), 8 * day)
    assert expired("2031-02", datetime(2031, 3, 9, 0, 1, tzinfo=UTC), 8 * day)
    assert not expired("2031-12", datetime(2032, 1, 2, tzinfo=UTC), 8 * day)
    assert expired("2031-12", datetime(2032, 1, 10, tzinfo=UTC), 8 * day)
