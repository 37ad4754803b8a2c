"""Usage reports: keys, months, and the sum a reader makes of a month's partitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pipeline.keys import usage_key, usage_prefix
from pipeline.usage import (
    UsageReport,
    current_month,
    month_of,
    next_month_start,
    sum_reports,
)


def _report(partition: int, audio: float, *, tenant: str = "acme", month: str = "2031-03",
            at: str = "2031-03-02T00:00:00.000Z") -> UsageReport:
    return UsageReport(tenant=tenant, month=month, partition=partition, audio_s=audio,
                       engine_s=audio / 10, requests=1, updated_at=at)


def test_keys_live_under_the_tenant_and_the_month() -> None:
    assert usage_key("2031-03", "vf-aggregator", 4) == "usage/2031-03/vf-aggregator/p004.json"
    assert usage_key("2031-03", "t1.vf-aggregator", 11, tenant="acme") == \
        "tenants/acme/usage/2031-03/t1.vf-aggregator/p011.json"
    assert usage_prefix("2031-12", "vf-aggregator", tenant="default") == \
        "usage/2031-12/vf-aggregator/"
    for bad in ("2031-13", "2031-3", "../2031-03", "2031-03/", ""):
        with pytest.raises(ValueError, match="YYYY-MM"):
            usage_prefix(bad, "vf-aggregator")
    with pytest.raises(ValueError):
        usage_prefix("2031-03", "../other")



def test_months_are_utc() -> None:
    east = timezone(timedelta(hours=9))
    assert month_of(datetime(2031, 4, 1, 8, 59, tzinfo=east)) == "2031-03"
    assert month_of(datetime(2031, 4, 1, 9, 0, tzinfo=east)) == "2031-04"
    assert month_of(datetime(2031, 4, 1)) == "2031-04"  # naive: UTC
    assert next_month_start("2031-12") == datetime(2032, 1, 1, tzinfo=UTC)
    assert next_month_start("2031-02") == datetime(2031, 3, 1, tzinfo=UTC)
    assert current_month(datetime(2031, 7, 31, 23, 59, tzinfo=UTC)) == "2031-07"


def test_the_sum_counts_each_partition_once_and_only_the_tenants_month() -> None:
    usage = sum_reports("acme", "2031-03", [
        _report(0, 1.5), _report(1, 2.25, at="2031-03-05T00:00:00.000Z"),
        _report(1, 99.0),  # the same partition twice: the first one read counts
        _report(2, 50.0, tenant="rival"), _report(3, 50.0, month="2031-02")])
    assert (usage.audio_s, usage.requests, usage.partitions) == (3.75, 2, 2)
    assert usage.engine_s == pytest.approx(0.375)
    assert usage.updated_at == "2031-03-05T00:00:00.000Z"


def test_nothing_published_is_zero_with_no_time() -> None:
    usage = sum_reports("acme", "2031-03", [])
    assert (usage.audio_s, usage.requests, usage.updated_at) == (0.0, 0, None)
