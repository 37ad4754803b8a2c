"""The gateway's audit trail: what each key did, one tts.audit.v1 event per action.

    a route, after its checks and before its side effect (store, voice event, requests):
      `await gw.audit.record(request, "voice.create", voice_id)`
      -> `audit_event`: tenant and key id from `request.state` (the guard put them there),
         the peer's address, the caller's X-Request-Id, the time
      -> produced to tts.audit (key = tenant) and acknowledged
      -> the route goes on; a produce that fails raises `AuditUnavailable`, which the app
         answers 503 `audit_unavailable` (Retry-After): the action is not done.

Failure policy: refuse, not log-and-continue. The issue's promise is that every voice
create or delete, consent, key change and job submission is on the topic; an action the
trail misses breaks it silently, which is worse than a retry. And it costs almost no
availability: each audited action itself produces to the same Kafka cluster (tts.voices,
tts.requests), so when the audit cannot be written the action could not have been either.
Written before the side effect, an event means the gateway accepted the action and began
it; the HTTP answer says whether it then succeeded (a store outage after the event: 503).
The key itself never reaches the event or a log line: `key_id` is 12 hex digits of its hash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from starlette.requests import Request

from pipeline.answers import now_iso
from topics.events import AuditEvent, encode
from topics.tenancy import DEFAULT_TENANT
from topics.validation import REQUEST_ID_MAX, check_id

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 10.0  # then the action is refused; the producer's own retries run within


class AuditUnavailable(Exception):
    """The audit event could not be written: the action must not happen."""


def caller_request_id(value: str | None) -> str | None:
    """The caller's X-Request-Id when it is a well-formed ID, else None (it goes into a
    record other tools read, so nothing arbitrary)."""
    if not value:
        return None
    try:
        return check_id("request_id", value.strip(), REQUEST_ID_MAX)
    except ValueError:
        return None


def audit_event(request: Request, action: str, obj: str) -> AuditEvent:
    """The event for `action` on `obj` by the key that authenticated `request`."""
    tenant = getattr(request.state, "tenant", None)
    client = request.client
    return AuditEvent(tenant=tenant.name if tenant is not None else DEFAULT_TENANT,
                      action=action, object=obj, time=now_iso(),
                      key_id=getattr(request.state, "key_id", None) or None,
                      client=client.host if client is not None else None,
                      request_id=caller_request_id(request.headers.get("x-request-id")))


class Audit:
    """Writes audit events with the gateway's producer (made at start, hence a getter)."""

    def __init__(self, producer: Callable[[], AIOKafkaProducer | None], topic: str, *,
                 on_record: Callable[[str, bool], None] | None = None) -> None:
        self._producer = producer
        self.topic = topic
        self._on_record = on_record

    async def record(self, request: Request, action: str, obj: str) -> AuditEvent:
        """Produce the event and wait for its acknowledgement; AuditUnavailable if not."""
        event = audit_event(request, action, obj)
        await self.send(event)
        return event

    async def send(self, event: AuditEvent) -> None:
        producer = self._producer()
        try:
            if producer is None:
                raise RuntimeError("the producer is not started")
            await asyncio.wait_for(producer.send_and_wait(
                self.topic, encode(event), key=event.tenant.encode()), SEND_TIMEOUT_S)
        except Exception as exc:
            self._count(event.action, ok=False)
            log.error("audit event %s %s of tenant %s not written, action refused: %s",
                      event.action, event.object, event.tenant, exc)
            raise AuditUnavailable(f"the audit trail is unavailable: {event.action} "
                                   "refused; retry later") from exc
        self._count(event.action, ok=True)
        log.info("audit: %s %s by tenant %s key %s", event.action, event.object,
                 event.tenant, event.key_id)

    def _count(self, action: str, *, ok: bool) -> None:
        if self._on_record is not None:
            self._on_record(action, ok)
