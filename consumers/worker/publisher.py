"""Publishing a request's answer: result and/or DLQ record, acknowledged by the broker.

    Checkpoint.answer -> publish(rec, result=..., dlq=...):
        result -> errors.deliver(send to tts.results + ack)
            refused for good (Undeliverable): logged, and a DLQ record names it instead
        dlq    -> DeadLetters.publish (deadletters.py): inline, by reference to the stored
            value, truncated, minimal: the first stage that fits and is acknowledged
    returns once every record it sent is acknowledged (acks=all) -> the offset may commit

One error policy (errors.py) for all of it: a retriable error (broker unreachable, leader
moving) backs off and sends again for as long as it takes, since an answer never delivered
must keep its offset uncommitted; a record the broker can never take gets a smaller answer
and the offset moves on; a fatal producer state (fenced, not authorized) calls `on_fatal`
(the worker drops readiness and stops) and raises FatalPublishError, so the offset stays
uncommitted for the next owner.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka import ConsumerRecord

from consumers.kafka import PRODUCER_MAX_REQUEST_BYTES
from consumers.tracing import child_traceparent
from consumers.worker.deadletters import DeadLetters, dead_letter
from consumers.worker.errors import Backoff, OnFatal, Undeliverable, deliver
from pipeline.storage import ObjectStore
from topics.events import DeadLetter, SynthesisResult, encode
from topics.specs import TopicNames

log = logging.getLogger(__name__)

__all__ = ["Publisher", "dead_letter"]


class Publisher:
    def __init__(self, *, producer: Any, names: TopicNames, max_backoff_s: float = 5.0,
                 store: ObjectStore | None = None,
                 max_request_size: int = PRODUCER_MAX_REQUEST_BYTES,
                 on_fatal: OnFatal | None = None, store_retry_s: float = 300.0) -> None:
        self._producer = producer
        self._names = names
        self._backoff = Backoff(max_s=max_backoff_s)
        self._on_fatal = on_fatal
        self.dead_letters = DeadLetters(producer=producer, topic=names.dlq, store=store,
                                        max_request_size=max_request_size,
                                        backoff=self._backoff, on_fatal=on_fatal,
                                        store_retry_s=store_retry_s)

    async def publish(self, rec: ConsumerRecord[bytes, bytes], *,
                      result: SynthesisResult | None = None,
                      dlq: DeadLetter | None = None) -> None:
        if result is not None and not await self._result(rec, result) and dlq is None:
            dlq = dead_letter(rec, f"result undeliverable: {result.status} result for "
                                   f"request {result.request_id} refused by the broker")
        if dlq is not None:
            await self.dead_letters.publish(rec, dlq)

    async def _result(self, rec: ConsumerRecord[bytes, bytes], result: SynthesisResult) -> bool:
        """True once acknowledged; False when the broker refused it for good."""
        value = encode(result)
        headers = [("traceparent", child_traceparent(rec.headers).encode())]

        async def attempt() -> None:
            delivery = await self._producer.send(self._names.results, value,
                                                 key=result.result_key(), headers=headers)
            await delivery

        ctx = {"partition": rec.partition, "offset": rec.offset,
               "request_id": result.request_id}
        try:
            await deliver(attempt, what="result", backoff=self._backoff,
                          on_fatal=self._on_fatal, ctx=ctx)
        except Undeliverable as exc:
            log.error("result (%d bytes) refused for good: %s; dead-lettering the request",
                      len(value), exc, extra=ctx)
            return False
        return True
