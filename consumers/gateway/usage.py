"""Usage and monthly quotas at the gateway: GET /v1/usage, and 429 `quota_exceeded`.

    GET /v1/usage[?month=YYYY-MM] (the caller's tenant only; default: this UTC month)
      -> `UsageBook.get(tenant, month)` -> pipeline.usage.read_usage: the reports the
         aggregator of this deployment (`report_source(VF_TOPIC_PREFIX)`) published for
         the tenant and month, summed -> `UsageAnswer`
    POST /v1/audio/speech, POST /v1/jobs, POST /v1/jobs/{id}/rerun, before anything is
    stored or produced -> `over_quota(book, tenant)`: a key with `monthly_audio_s` whose
    tenant used at least that much this month -> 429 `quota_exceeded`, Retry-After: the
    seconds until the next month starts (UTC), when the quota is fresh again.

The numbers are the last published ones: they lag the results by the aggregator's publish
interval (VF_USAGE_PUBLISH_S) plus this replica's cache (VF_GATEWAY_USAGE_CACHE_S), so a
tenant can go over its quota by what it synthesizes within that lag; the quota stops new
work, it does not cut off work already accepted (docs/usage.md). Tenants without a quota
cost no store reads on the request path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from consumers.gateway.keys import Tenant
from consumers.gateway.serve import json_error
from pipeline.keys import check_month
from pipeline.storage import ObjectStore
from pipeline.usage import Usage, current_month, next_month_start, read_usage

log = logging.getLogger(__name__)


class UsageAnswer(msgspec.Struct, kw_only=True):
    """GET /v1/usage: the tenant's month as last published by the aggregator."""

    object: Literal["usage"]
    tenant: str
    month: str  # YYYY-MM, UTC
    audio_seconds: float  # delivered audio, each request counted once
    engine_seconds: float  # the engine's time for it (rtf x duration)
    requests: int  # distinct requests counted
    updated_at: str | None  # when the newest report was written; None: nothing counted yet
    monthly_audio_seconds: float | None  # the key's quota; None: none
    remaining_audio_seconds: float | None  # quota less usage, >= 0; None without a quota


class UsageBook:
    """Each tenant's usage as published, read at most once per `ttl_s` per (tenant, month)."""

    def __init__(self, store: ObjectStore, source: str, *, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._source = source
        self._ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Usage]] = {}

    async def get(self, tenant: str, month: str) -> Usage:
        """Raises the store's VoiceFactoryError (the app answers 503) when it is down."""
        now = self._clock()
        hit = self._cache.get((tenant, month))
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        usage = await asyncio.to_thread(read_usage, self._store, tenant, month, self._source)
        if len(self._cache) > 10_000:  # tenants x months: bounded, stale entries dropped
            self._cache.clear()
        self._cache[(tenant, month)] = (now, usage)
        return usage


async def over_quota(book: UsageBook, tenant: Tenant,
                     now: datetime | None = None) -> Response | None:
    """The 429 for a tenant at or over its monthly audio quota, else None."""
    quota = tenant.monthly_audio_s
    if quota is None:
        return None
    now = now or datetime.now(UTC)
    month = current_month(now)
    try:
        usage = await book.get(tenant.name, month)
    except ValueError as exc:  # an unreadable report: not the tenant's fault, let it through
        log.error("usage of tenant %s unreadable, quota not enforced: %s", tenant.name, exc)
        return None
    if usage.audio_s < quota:
        return None
    resets = next_month_start(month)
    wait_s = max(1, int((resets - now).total_seconds()) + 1)
    return json_error(429, f"tenant {tenant.name} used {usage.audio_s:g} of its {quota:g} "
                           f"audio seconds for {month}; the quota resets at "
                           f"{resets:%Y-%m-%dT%H:%M:%SZ}", "quota_exceeded",
                      retry_after=wait_s)


async def get_usage(request: Request) -> Response:
    book: UsageBook = request.app.state.gateway.usage  # runtime.Gateway (imports this module)
    tenant: Tenant = request.state.tenant
    # an empty ?month= is a malformed month, not "this month": the query names one or not
    month = request.query_params.get("month", current_month())
    try:
        check_month(month)
    except ValueError as exc:
        return json_error(400, str(exc), "invalid_request", param="month")
    try:
        usage = await book.get(tenant.name, month)
    except ValueError as exc:
        log.error("usage of tenant %s unreadable: %s", tenant.name, exc)
        return json_error(500, f"the usage of {month} is unreadable; the operator is told",
                          "usage_unreadable")
    quota = tenant.monthly_audio_s
    answer = UsageAnswer(object="usage", tenant=tenant.name, month=month,
                         audio_seconds=usage.audio_s, engine_seconds=usage.engine_s,
                         requests=usage.requests, updated_at=usage.updated_at,
                         monthly_audio_seconds=quota,
                         remaining_audio_seconds=None if quota is None else
                         round(max(0.0, quota - usage.audio_s), 3))
    return Response(msgspec.json.encode(answer), media_type="application/json")


def routes() -> list[Route]:
    return [Route("/v1/usage", get_usage, methods=["GET"])]
