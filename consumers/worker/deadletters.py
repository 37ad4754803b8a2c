"""Dead letters that always fit on tts.dlq, whatever the record they carry.

    dead_letter(rec, reason): the whole original inline (key, value, headers in base64, a
        null header value as null), with the value's size and sha256
    unreadable_letter(tp, offset, reason): for a record the client could not parse
        (unreadable.py): where it is and why, `omitted` naming key, value and headers
    DeadLetters.publish(rec, dlq), one stage after the other until one is acknowledged:
      1. inline      the record as given, when its estimated size is within `inline_limit`
                     (half the producer's max_request_size: base64, the Kafka key and
                     headers and the batch all need room)
      2. trimmed     the value is small and the key or headers are what is too big: the
                     value stays inline, and what does not fit is left out (`omitted`)
         by ref      else the value stored as the object dlq/<topic>/<partition>/<offset>.bin
                     (pipeline.keys; sha256 in its metadata); the record carries value_ref,
                     value_sha256, value_bytes and a short prefix; the key and headers stay
                     inline while they fit, else `omitted` names them
         truncated   no store, or the store refused for `store_retry_s`: the prefix and the
                     sha256 only, `omitted` names the value
      4. minimal     where the record came from, why, sizes and hashes: a few hundred bytes
    Each send goes through errors.deliver: a retriable error backs off and sends again, a
    refusal (GIVE_UP) moves to the next stage, a fatal producer error propagates. When even
    the minimal record is refused the record is logged and given up: its offset commits
    anyway, because no later attempt could do better.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from typing import Any, Literal

import msgspec
from aiokafka import ConsumerRecord, TopicPartition

from consumers.worker.errors import Backoff, OnFatal, Undeliverable, deliver
from pipeline.answers import now_iso
from pipeline.keys import dlq_value_key
from pipeline.storage import ObjectStore
from topics.errors import VoiceFactoryError
from topics.events import DeadLetter, encode

log = logging.getLogger(__name__)

PREFIX_BYTES = 64  # of a value kept by reference or truncated: enough to recognise it
_REASON_HEADER = "vf-reason"
_HEADER_OVERHEAD = 16  # varints and attributes per Kafka header, generously
_RECORD_OVERHEAD = 512  # record and batch framing, generously

Part = Literal["key", "value", "headers"]
KafkaHeaders = list[tuple[str, bytes | None]]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def dead_letter(rec: ConsumerRecord[bytes, bytes], reason: str) -> DeadLetter:
    """The original bytes, key and headers (base64) with where they came from and why."""
    value = rec.value or b""
    return DeadLetter(
        topic=rec.topic, partition=rec.partition, offset=rec.offset, reason=reason,
        failed_at=now_iso(),
        key_b64=_b64(rec.key) if rec.key is not None else None,
        value_b64=_b64(value),
        headers=[(k, None if v is None else _b64(v)) for k, v in rec.headers],
        value_bytes=len(value), value_sha256=hashlib.sha256(value).hexdigest())


def unreadable_letter(tp: TopicPartition, offset: int,
                      reason: str) -> tuple[ConsumerRecord[bytes, bytes], DeadLetter]:
    """A stand-in record and the dead letter of a record the client could not read at all
    (unreadable.py): where it is and why, nothing of its bytes."""
    rec: ConsumerRecord[bytes, bytes] = ConsumerRecord(
        topic=tp.topic, partition=tp.partition, offset=offset, timestamp=-1, timestamp_type=0,
        key=None, value=None, checksum=None, serialized_key_size=-1,
        serialized_value_size=-1, headers=[])
    return rec, DeadLetter(topic=tp.topic, partition=tp.partition, offset=offset,
                           reason=reason, failed_at=now_iso(),
                           omitted=["headers", "key", "value"])


def inline_limit(max_request_size: int) -> int:
    """The largest DLQ record (JSON, Kafka key and headers) sent as it is."""
    return max_request_size // 2


def record_size(value: bytes, key: bytes | None, headers: KafkaHeaders) -> int:
    """A generous estimate of what the producer counts against max_request_size."""
    return (len(value) + len(key or b"") + _RECORD_OVERHEAD
            + sum(len(k.encode()) + len(v or b"") + _HEADER_OVERHEAD for k, v in headers))


class DeadLetters:
    """Sends DLQ records under the stages above. `store` None: no stage 2."""

    def __init__(self, *, producer: Any, topic: str, store: ObjectStore | None,
                 max_request_size: int, backoff: Backoff, on_fatal: OnFatal | None = None,
                 store_retry_s: float = 300.0) -> None:
        self._producer = producer
        self._topic = topic
        self._store = store
        self.limit = inline_limit(max_request_size)
        self._backoff = backoff
        self._on_fatal = on_fatal
        self._store_retry_s = store_retry_s

    async def publish(self, rec: ConsumerRecord[bytes, bytes], dlq: DeadLetter) -> str:
        """Send the first stage that fits and is acknowledged; returns its name."""
        headers: KafkaHeaders = [*rec.headers, (_REASON_HEADER, dlq.reason.encode()[:512])]
        fits = record_size(encode(dlq), rec.key, headers) <= self.limit
        if fits and await self._send("inline", rec, dlq, rec.key, headers):
            return "inline"
        value = rec.value or b""
        if not fits and 4 * len(value) // 3 + 4 <= self.limit // 2:
            # The key or the headers are what is too big: the value stays inline.
            smaller, stage = dlq, "trimmed"
        else:
            ref = await self._stored(rec, value)
            smaller = msgspec.structs.replace(
                dlq, value_b64="", value_ref=ref, value_prefix_b64=_b64(value[:PREFIX_BYTES]),
                value_bytes=len(value), value_sha256=hashlib.sha256(value).hexdigest(),
                omitted=[] if ref is not None else ["value"])
            stage = "by ref" if ref is not None else "truncated"
        fitted, key, kafka_headers = self._fit(rec, smaller)
        if await self._send(stage, rec, fitted, key, kafka_headers):
            return stage
        dropped: set[Part] = set(smaller.omitted)
        if rec.key is not None:
            dropped.add("key")
        if rec.headers:
            dropped.add("headers")
        if value and smaller.value_ref is None:
            dropped.add("value")
        minimal = msgspec.structs.replace(smaller, key_b64=None, headers=[], value_b64="",
                                          value_prefix_b64=None, omitted=sorted(dropped))
        if await self._send("minimal", rec, minimal, None,
                            [(_REASON_HEADER, dlq.reason.encode()[:512])]):
            return "minimal"
        log.error("dead letter refused at every size; giving the record up so its partition "
                  "moves on", extra=_ctx(rec))
        return "lost"

    def _fit(self, rec: ConsumerRecord[bytes, bytes],
             dlq: DeadLetter) -> tuple[DeadLetter, bytes | None, KafkaHeaders]:
        """`dlq` with the original headers, then the key, left out while it does not fit."""
        reason: KafkaHeaders = [(_REASON_HEADER, dlq.reason.encode()[:512])]
        omitted: set[Part] = set(dlq.omitted)
        headers: KafkaHeaders = [*rec.headers, *reason]
        key = rec.key
        if rec.headers and record_size(encode(dlq), key, headers) > self.limit:
            omitted.add("headers")
            dlq = msgspec.structs.replace(dlq, headers=[], omitted=sorted(omitted))
            headers = reason
        if key is not None and record_size(encode(dlq), key, headers) > self.limit:
            omitted.add("key")
            dlq = msgspec.structs.replace(dlq, key_b64=None, omitted=sorted(omitted))
            key = None
        return dlq, key, headers

    async def _stored(self, rec: ConsumerRecord[bytes, bytes], value: bytes) -> str | None:
        """The value as an object: its s3:// reference, or None when it cannot be stored."""
        store = self._store
        if store is None:
            return None
        key = dlq_value_key(rec.topic, rec.partition, rec.offset)
        meta = {"sha256": hashlib.sha256(value).hexdigest(),
                "source": f"{rec.topic}/{rec.partition}/{rec.offset}"}
        started, tries = time.monotonic(), 0
        while True:
            try:
                await asyncio.to_thread(store.put, key, value, "application/octet-stream", meta)
                return f"s3://{store.bucket}/{key}"
            except VoiceFactoryError as exc:
                tries += 1
                if not exc.retryable or time.monotonic() - started >= self._store_retry_s:
                    log.error("dead letter value could not be stored (%s); sending its "
                              "prefix and sha256 only", exc, extra=_ctx(rec))
                    return None
                delay = self._backoff.delay(tries)
                log.warning("storing the dead letter value failed (%s), retrying in %.1f s",
                            exc, delay, extra=_ctx(rec))
                await asyncio.sleep(delay)

    async def _send(self, stage: str, rec: ConsumerRecord[bytes, bytes], dlq: DeadLetter,
                    key: bytes | None, headers: KafkaHeaders) -> bool:
        """True once acknowledged; False when the broker or producer refused it for good."""
        value = encode(dlq)

        async def attempt() -> None:
            delivery = await self._producer.send(self._topic, value, key=key, headers=headers)
            await delivery

        try:
            await deliver(attempt, what=f"dead letter ({stage})", backoff=self._backoff,
                          on_fatal=self._on_fatal, ctx=_ctx(rec))
        except Undeliverable as exc:
            log.warning("dead letter (%s, %d bytes) refused: %s", stage, len(value), exc,
                        extra=_ctx(rec))
            return False
        return True


def _ctx(rec: ConsumerRecord[bytes, bytes]) -> dict[str, object]:
    return {"topic": rec.topic, "partition": rec.partition, "offset": rec.offset}
