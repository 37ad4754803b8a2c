"""`voicefactory audit tail` and the CLI's own audit events (key changes).

    audit tail: tts.audit (all partitions assigned, no group) --seek to the end or the
      beginning--> getmany -> decode_audit -> `--tenant` filter -> audit_line -> out, until
      interrupted, `limit` events, or `idle_s` seconds without one
    keys add / keys revoke (consumers/gateway/cli.py) -> `cli_event` -> `send_event`:
      produced and acknowledged within `timeout_s`, or an error the CLI reports; the change
      to the keys file is made either way (a revocation must never wait on Kafka)
"""

from __future__ import annotations

import asyncio
import getpass
import socket
from typing import TextIO

import msgspec

from consumers.clients.tail import follow_topic
from consumers.kafka import make_producer
from consumers.settings import Settings
from pipeline.answers import now_iso
from topics.events import AuditEvent, decode_audit, encode
from topics.specs import AUDIT, topic_names


def cli_client() -> str:
    """`cli:<user>@<host>`: who ran the command, as far as this machine knows."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's random UID)
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def cli_event(tenant: str, action: str, obj: str) -> AuditEvent:
    return AuditEvent(tenant=tenant, action=action, object=obj, time=now_iso(),
                      client=cli_client())


async def send_event(settings: Settings, event: AuditEvent, *, timeout_s: float = 15.0,
                     ) -> tuple[int, int]:
    """Produce `event` to tts.audit (key = tenant); its (partition, offset) once acknowledged.
    TimeoutError when the broker does not answer within `timeout_s`."""
    topic = topic_names(settings.kafka.topic_prefix).audit
    producer = make_producer(settings.kafka, request_timeout_ms=int(timeout_s * 1000))

    async def send() -> tuple[int, int]:
        await producer.start()
        meta = await producer.send_and_wait(topic, encode(event), key=event.tenant.encode())
        return meta.partition, meta.offset

    try:
        return await asyncio.wait_for(send(), timeout_s)
    finally:
        await producer.stop()


async def tail_audit(settings: Settings, *, from_beginning: bool, out: TextIO,
                     tenant: str | None = None, limit: int | None = None,
                     idle_s: float | None = None) -> int:
    """`audit tail`: one line per event (of `tenant` only, when given) on every partition,
    until interrupted (or `limit` events, or `idle_s` seconds without one). Returns the
    count printed."""
    return await follow_topic(
        settings, topic_names(settings.kafka.topic_prefix).audit, AUDIT.partitions,
        lambda raw: _line_of(raw, tenant), from_beginning=from_beginning, out=out,
        limit=limit, idle_s=idle_s)


def _line_of(raw: bytes | None, tenant: str | None) -> str | None:
    try:
        event = decode_audit(raw or b"{}")
    except msgspec.DecodeError:  # not ours to judge here; the schema test guards writers
        return None
    if tenant is not None and event.tenant != tenant:
        return None
    return audit_line(event)


def audit_line(event: AuditEvent) -> str:
    extra = f" request={event.request_id}" if event.request_id else ""
    return (f"{event.time} {event.tenant} {event.action:<14} {event.object} "
            f"key={event.key_id or '-'} client={event.client or '-'}{extra}")
