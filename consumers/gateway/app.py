"""The gateway's ASGI app (Starlette on uvicorn): HTTP in, lane requests out, replies back.

    request -> `Guard` (pure ASGI, outermost): /v1/* needs `Authorization: Bearer KEY`
      (401; a revoked key too), a scope the route accepts (403 `missing_scope`,
      consumers.gateway.scopes), the tenant's token bucket (429 + Retry-After), a declared
      body within the limit
      (413 before reading), and counts the body as it arrives (413 once over, whatever the
      framing); every exchange -> vf_gateway_requests_total{route,status}
    -> Starlette routes: speech (below), voices and jobs (`consumers.gateway.voices`,
      `consumers.gateway.jobs`),
      stored bytes and the fleet summary for the console (`consumers.gateway.console_api`),
      /openapi.json (`consumers.gateway.openapi`, no key), and the console's files under
      /console (no key: `consumers.gateway.console`). /healthz, /readyz and /metrics are
      not here: they answer on the ops port only (`consumers.gateway.ops`)
    speech: body -> JSON -> `parse_speech` (400; the requests carry the key's tenant) -> the
      tenant's monthly quota (429, consumers.gateway.usage, also GET /v1/usage) -> the
      tenant's voice? (404, as for an unknown one) -> lane lag under
      the threshold? (503) -> a stream slot (429) -> a reply partition (503 while none)
      -> requests routed (consumers.fleet) to tts.requests.interactive with
      `vf-reply-partition`; a worker gone before the first chunk: sent again (failover.py)
      -> `SpeechAnswer` streams the chunk records back (consumers.gateway.serve).
Nothing reaches Kafka before every check passed. Keys and secrets never reach a log line:
only tenant names are logged.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from aiokafka.errors import KafkaError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.gateway import (
    consents,
    console,
    console_api,
    jobs,
    openapi,
    scopes,
    usage,
    voices,
)
from consumers.gateway.audit import AuditUnavailable
from consumers.gateway.keys import Tenant, bearer
from consumers.gateway.replies import NoReplyPartition, ReplyStream
from consumers.gateway.runtime import Gateway
from consumers.gateway.serve import SpeechAnswer, json_error
from consumers.gateway.speech import BadField, parse_speech
from topics.errors import ErrorCode, VoiceFactoryError

log = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over the limit of {limit:,} bytes")
        self.limit = limit


# -- routes ----------------------------------------------------------------------------------

async def speech(request: Request) -> Response:
    gw: Gateway = request.app.state.gateway
    received = time.monotonic()
    tenant: Tenant = request.state.tenant
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        return json_error(400, f"the body is not JSON: {exc}", "invalid_json")
    try:
        order = parse_speech(body, tenant=tenant.name)
    except BadField as exc:
        return json_error(400, str(exc), "invalid_request", param=exc.field)
    if (over := await usage.over_quota(gw.usage, tenant)) is not None:
        return over
    if not await gw.voice_exists(order.voice_id, tenant.name):
        return json_error(404, f"voice {order.voice_id!r} is not registered (POST /v1/voices)",
                          "voice_not_found", param="voice")
    limits = gw.settings.gateway
    if gw.lag.lag is not None and gw.lag.lag > limits.lag_threshold:
        return json_error(503, f"the interactive lane is {gw.lag.lag} requests behind "
                               f"(threshold {limits.lag_threshold}); retry later",
                          "overloaded", retry_after=max(1, round(limits.lag_interval_s)))
    refusal = gw.limiter.open_stream(tenant)
    if refusal is not None:
        return json_error(429, refusal.reason, "too_many_streams",
                          retry_after=refusal.retry_after_s)
    ids = [r.request_id for r in order.requests]

    def on_end() -> None:
        gw.finished(ids)
        gw.router.unregister(ids)
        gw.limiter.close_stream(tenant)
        gw.metrics.set_open_streams(gw.limiter.open_streams())

    try:
        partition = gw.router.register(ids)
        await gw.produce(gw.names.requests_interactive, order.requests, partition)
    except NoReplyPartition as exc:
        on_end()
        return json_error(503, str(exc), "not_ready", retry_after=1)
    except Exception as exc:
        on_end()
        log.warning("speech request of tenant %s not produced: %s", tenant.name, exc)
        return json_error(503, "the request could not be queued; retry later", "kafka_error",
                          retry_after=1)
    gw.metrics.set_open_streams(gw.limiter.open_streams())
    streams = [ReplyStream(i, gw.router.queue(i), limits.timeout_s,
                           on_gap=functools.partial(gw.router.repair, i)) for i in ids]
    return SpeechAnswer(order, streams, received_at=received,
                        on_first_byte=gw.metrics.observe_ttfb,
                        on_cancel=functools.partial(gw.cancel, tenant=tenant.name),
                        on_end=on_end)


async def _too_large(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BodyTooLarge)
    return json_error(413, str(exc), "body_too_large")


async def _store_error(request: Request, exc: Exception) -> Response:
    """The object store (voice registry, job manifests) failed: the caller may retry."""
    assert isinstance(exc, VoiceFactoryError)
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    if exc.code == ErrorCode.STORAGE_ERROR:
        return json_error(503, "the object store is unavailable; retry later",
                          "storage_unavailable", retry_after=1)
    return json_error(500, str(exc), str(exc.code))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, a method the route lacks, a form it cannot
    parse) in the same error object as every other answer, not plain text."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
    response = json_error(exc.status_code, exc.detail, code)
    response.headers.update(exc.headers or {})  # 405's Allow
    return response


async def _audit_unavailable(request: Request, exc: Exception) -> Response:
    """The action's audit event was not written, so the action was not done
    (consumers/gateway/audit.py says why refusing is the policy)."""
    return json_error(503, str(exc), "audit_unavailable", retry_after=1)


async def _kafka_error(request: Request, exc: Exception) -> Response:
    """A voice event or a job's requests not produced: nothing was promised, retry."""
    log.warning("%s %s: Kafka: %s", request.method, request.url.path, exc)
    return json_error(503, "Kafka is unavailable; retry later", "kafka_error", retry_after=1)


def build_app(gateway: Gateway) -> ASGIApp:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = Starlette(routes=[
        Route("/v1/audio/speech", speech, methods=["POST"]),
        *voices.routes(), *jobs.routes(), *consents.routes(), *console_api.routes(),
        *console.routes(),
        *usage.routes(),
        Route("/openapi.json", openapi.openapi_json),
    ], lifespan=lifespan, exception_handlers={BodyTooLarge: _too_large,
                                              VoiceFactoryError: _store_error,
                                              KafkaError: _kafka_error,
                                              AuditUnavailable: _audit_unavailable,
                                              HTTPException: _http_error})
    app.state.gateway = gateway
    return Guard(app, gateway)


# -- the guard in front of everything ---------------------------------------------------------

_ROUTES = ((re.compile(r"/v1/voices/[^/]+"), "/v1/voices/{id}"),
           (re.compile(r"/v1/jobs/[^/]+"), "/v1/jobs/{id}"),
           (re.compile(r"/v1/voices/[^/]+/reference"), "/v1/voices/{id}/reference"),
           (re.compile(r"/v1/jobs/[^/]+/subtitles"), "/v1/jobs/{id}/subtitles"),
           (re.compile(r"/v1/jobs/[^/]+/clips/[0-9]+"), "/v1/jobs/{id}/clips/{index}"),
           (re.compile(r"/v1/jobs/[^/]+/clips\.zip"), "/v1/jobs/{id}/clips.zip"),
           (re.compile(r"/v1/jobs/[^/]+/timeline"), "/v1/jobs/{id}/timeline"),
           (re.compile(r"/v1/jobs/[^/]+/rerun"), "/v1/jobs/{id}/rerun"),
           (re.compile(r"/v1/jobs/[^/]+/cancel"), "/v1/jobs/{id}/cancel"),
           (re.compile(r"/v1/audio/voice_consents/[^/]+"), "/v1/audio/voice_consents/{id}"),
           (re.compile(r"/console(/.*)?"), "/console"))
_KNOWN = {"/v1/audio/speech", "/v1/voices", "/v1/jobs", "/v1/fleet", "/v1/usage",
          "/v1/audio/voice_consents", "/v1/audio/voices"}
# Routes that take audio uploads: the upload limit instead of the body limit.
_UPLOADS = frozenset({"/v1/voices", "/v1/audio/voice_consents", "/v1/audio/voices"})


def route_label(path: str) -> str:
    """The route template for metrics: a closed label set, never the raw path."""
    if path in _KNOWN:
        return path
    for pattern, label in _ROUTES:
        if pattern.fullmatch(path):
            return label
    return "other"


class Guard:
    def __init__(self, app: Starlette, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        status = [500]

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._refuse(scope) if path.startswith("/v1/") else None
            if refusal is not None:
                await refusal(scope, receive, counted_send)
                return
            await self.app(scope, _limited(receive, self._body_limit(scope)), counted_send)
        finally:
            self.gateway.metrics.on_response(route_label(path), status[0])

    def _body_limit(self, scope: Scope) -> int:
        """Voice and consent uploads carry audio: their own, larger limit."""
        limits = self.gateway.settings.gateway
        if scope["path"] in _UPLOADS and scope["method"] == "POST":
            return limits.max_upload_bytes
        return limits.max_body_bytes

    def _refuse(self, scope: Scope) -> Response | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        key = bearer(headers.get("authorization"))
        if not key:
            return json_error(401, "missing API key: send Authorization: Bearer KEY",
                              "missing_api_key")
        tenant = self.gateway.keys.lookup(key)
        if tenant is None:
            revoked = self.gateway.keys.revoked(key)
            return json_error(401, "API key revoked" if revoked else "invalid API key",
                              "invalid_api_key")
        route = scopes.route_of(self.app.routes, scope)
        if route is not None:
            denied = scopes.refusal(tenant.scopes, *route)
            if denied is not None:
                return denied
        refusal = self.gateway.limiter.admit(tenant)
        if refusal is not None:
            return json_error(429, refusal.reason, "rate_limited",
                              retry_after=refusal.retry_after_s)
        limit = self._body_limit(scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return json_error(413, f"request body of {int(declared):,} bytes is over the limit "
                                   f"of {limit:,} bytes", "body_too_large")
        state = scope.setdefault("state", {})
        state["tenant"] = tenant
        state["key_id"] = tenant.key_id  # who acted, for the audit (never the key)
        return None


def _limited(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def limited() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return limited
