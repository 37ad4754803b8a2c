"""The audit events a unit-tested gateway would write, kept in a list instead of Kafka.

Unit tests of routes check which events a route asks for; that they reach tts.audit is
tests/integration/test_scopes_audit.py's, over the real broker."""

from __future__ import annotations

from consumers.gateway.runtime import Gateway
from topics.events import AuditEvent


def recorded(gateway: Gateway) -> list[AuditEvent]:
    events: list[AuditEvent] = []

    async def send(event: AuditEvent) -> None:
        events.append(event)

    gateway.audit.send = send  # type: ignore[method-assign]
    return events
