"""The worker's record of one request between the fetch and its answer.

fetch loop: decoded record -> InFlightRequest (its lane from the record's topic) ->
VoiceBatcher queue of (lane, voice) -> a dispatcher hands `request` and a `Received` stamp
to the processor -> retryable failure: `attempt` and `first_failure` move on and it goes
back in the queue -> answered: the Checkpoint marks its offset done. A cancel that names it
(by request or job ID) answers it `cancelled` wherever it waits. (Named for what it is; a
`Job` in this product is a video script.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from consumers.worker.batching import Lane
from consumers.worker.chunks import ChunkStream
from pipeline.synthesis import Received
from topics.events import SynthesisRequest


@dataclass
class InFlightRequest:
    record: ConsumerRecord[bytes, bytes]
    tp: TopicPartition
    request: SynthesisRequest
    stamp: datetime  # the record's broker timestamp: when the request was received
    attempt: int = 1
    first_failure: float | None = None  # monotonic time of the first retryable failure
    lane: Lane = "batch"
    queued_at: float = field(default_factory=time.monotonic)  # last put in the batcher
    consumed_at: float = field(default_factory=time.monotonic)  # taken off its topic
    stream: ChunkStream | None = None  # a streamed request's current attempt (streams.py)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def job_id(self) -> str | None:
        return self.request.job.id if self.request.job else None

    def received(self, cancelled: Callable[[], bool]) -> tuple[SynthesisRequest, Received]:
        """The processor's input, stamped now: `queued_ms` runs from the broker timestamp to
        this call, which the batch thread makes once it holds its device slot (gate.py)."""
        return self.request, Received(timestamp=self.stamp, attempt=self.attempt,
                                      cancelled=cancelled, queued_ms=self.queued_ms())

    def queued_ms(self) -> float:
        """From the record's broker timestamp to now."""
        return max(0.0, time.time() * 1000 - float(self.record.timestamp))

    def ctx(self) -> dict[str, Any]:
        """The log fields every line about this request carries."""
        return {"topic": self.tp.topic, "partition": self.tp.partition,
                "offset": self.record.offset,
                "request_id": self.request.request_id, "voice_id": self.request.voice_id}
