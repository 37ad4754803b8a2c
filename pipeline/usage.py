"""Usage reports: what the aggregator publishes per tenant and month, and how it is read.

    aggregator (consumers/aggregator/metering.py), every VF_USAGE_PUBLISH_S:
      per owned tts.results partition p, tenant T, month M
      -> `UsageReport` -> {tenant root}usage/{M}/{source}/p{ppp}.json (pipeline.keys.usage_key;
         source: the aggregator's faust app ID, `report_source(VF_TOPIC_PREFIX)`)
    gateway (GET /v1/usage, quotas) and `voicefactory usage`:
      `read_usage(store, T, M, source)` -> list {tenant root}usage/{M}/{source}/ -> sum the
      partitions' reports -> `Usage`

One object per partition, not one per tenant and month, because a partition is the unit
an aggregator owns: each report has exactly one writer at a time, and a partition that
moves to another aggregator is rewritten by its new owner from the same changelog, so no
two writers ever add to the same number. The sum is therefore exact up to the publish
interval (the lag docs/usage.md states). Months are UTC calendar months.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from pipeline.keys import check_month, usage_prefix
from pipeline.storage import ObjectStore
from topics.tenancy import tenant_of

REPORT_SCHEMA = "vf.usage.v1"
AGGREGATOR_APP = "vf-aggregator"  # consumers.aggregator.app.APP_ID


def report_source(topic_prefix: str) -> str:
    """Which aggregator group's reports a reader sums: the one of its own topic prefix."""
    return topic_prefix + AGGREGATOR_APP


class UsageReport(msgspec.Struct, kw_only=True):
    """One partition's count for one tenant and month."""

    tenant: str
    month: str  # YYYY-MM, UTC
    partition: int  # of tts.results
    audio_s: float  # seconds of delivered audio, one request counted once
    engine_s: float  # the engine's share of device time for them (rtf x duration)
    requests: int  # distinct request IDs counted
    updated_at: str  # RFC 3339, when the aggregator wrote this report
    schema: str = REPORT_SCHEMA


class Usage(msgspec.Struct, kw_only=True):
    """A tenant's month: the sum of its partitions' reports."""

    tenant: str
    month: str
    audio_s: float = 0.0
    engine_s: float = 0.0
    requests: int = 0
    updated_at: str | None = None  # the newest report's; None: nothing counted yet
    partitions: int = 0  # reports summed


_encoder = msgspec.json.Encoder()
_report_decoder = msgspec.json.Decoder(UsageReport)


def encode_report(report: UsageReport) -> bytes:
    return _encoder.encode(report)


def decode_report(raw: bytes) -> UsageReport:
    return _report_decoder.decode(raw)


def month_of(when: datetime) -> str:
    """The UTC month of an instant; a naive datetime is taken as UTC."""
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return f"{when.year:04d}-{when.month:02d}"


def month_start(month: str) -> datetime:
    check_month(month)
    return datetime(int(month[:4]), int(month[5:]), 1, tzinfo=UTC)


def next_month_start(month: str) -> datetime:
    start = month_start(month)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else \
        start.replace(month=start.month + 1)


def current_month(now: datetime | None = None) -> str:
    return month_of(now or datetime.now(UTC))


def sum_reports(tenant: str, month: str, reports: list[UsageReport]) -> Usage:
    """The month's usage from its partitions' reports. A report naming another tenant,
    month or a partition already seen is left out (an object copied by hand to a wrong
    place must not be counted as this tenant's)."""
    usage = Usage(tenant=tenant, month=month)
    seen: set[int] = set()
    for r in reports:
        if r.tenant != tenant or r.month != month or r.partition in seen:
            continue
        seen.add(r.partition)
        usage.audio_s += r.audio_s
        usage.engine_s += r.engine_s
        usage.requests += r.requests
        usage.partitions += 1
        if usage.updated_at is None or r.updated_at > usage.updated_at:
            usage.updated_at = r.updated_at
    usage.audio_s = round(usage.audio_s, 3)
    usage.engine_s = round(usage.engine_s, 3)
    return usage


def read_usage(store: ObjectStore, tenant: str | None, month: str, source: str) -> Usage:
    """A tenant's usage of `month` as last published (blocking: the store is minio's).
    Raises the store's VoiceFactoryError when it cannot be listed or read; an unreadable
    report raises ValueError naming it."""
    name = tenant_of(tenant)
    reports: list[UsageReport] = []
    for key in store.list_prefix(usage_prefix(month, source, tenant=name)):
        raw = store.get(key)
        if raw is None:  # deleted between the listing and the read
            continue
        try:
            reports.append(decode_report(raw))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ValueError(f"usage report {key} is unreadable: {exc}") from None
    return sum_reports(name, month, reports)
