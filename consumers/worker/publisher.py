"""Publishing a request's answer: result and/or DLQ record, acknowledged by the broker.

publish() returns only once every record it sent is acknowledged (acks=all); when the broker
is unreachable it retries with backoff instead of failing, because an answer that was
never delivered must keep its offset uncommitted, and giving up would stall the partition.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from typing import Any

from aiokafka import ConsumerRecord
from aiokafka.errors import KafkaError

from consumers.tracing import child_traceparent
from pipeline.answers import now_iso
from topics.events import DeadLetter, SynthesisResult, encode
from topics.specs import TopicNames

log = logging.getLogger(__name__)


def dead_letter(rec: ConsumerRecord[bytes, bytes], reason: str) -> DeadLetter:
    """The original bytes, key and headers (base64) with where they came from and why."""
    return DeadLetter(
        topic=rec.topic, partition=rec.partition, offset=rec.offset, reason=reason,
        failed_at=now_iso(),
        key_b64=base64.b64encode(rec.key).decode() if rec.key is not None else None,
        value_b64=base64.b64encode(rec.value or b"").decode(),
        headers=[(k, base64.b64encode(v).decode()) for k, v in rec.headers])


class Publisher:
    def __init__(self, *, producer: Any, names: TopicNames, max_backoff_s: float = 5.0) -> None:
        self._producer = producer
        self._names = names
        self._max_backoff_s = max_backoff_s

    async def publish(self, rec: ConsumerRecord[bytes, bytes], *,
                      result: SynthesisResult | None = None,
                      dlq: DeadLetter | None = None) -> None:
        attempt = 0
        while True:
            try:
                await self._send(rec, result, dlq)
                return
            except KafkaError as exc:
                attempt += 1
                delay = min(self._max_backoff_s, 0.2 * 2 ** attempt) * random.uniform(0.5, 1.0)  # noqa: S311
                log.warning("publishing the answer failed (%s), retrying in %.1f s", exc, delay,
                            extra={"partition": rec.partition, "offset": rec.offset,
                                   "request_id": result.request_id if result else None})
                await asyncio.sleep(delay)

    async def _send(self, rec: ConsumerRecord[bytes, bytes], result: SynthesisResult | None,
                    dlq: DeadLetter | None) -> None:
        futures = []
        if result is not None:
            headers = [("traceparent", child_traceparent(rec.headers).encode())]
            futures.append(await self._producer.send(
                self._names.results, encode(result), key=result.result_key(), headers=headers))
        if dlq is not None:
            futures.append(await self._producer.send(
                self._names.dlq, encode(dlq), key=rec.key,
                headers=[*rec.headers, ("vf-reason", dlq.reason.encode()[:512])]))
        await asyncio.gather(*futures)
