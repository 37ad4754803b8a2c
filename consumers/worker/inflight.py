"""The worker's record of one request between the fetch and its answer.

fetch loop: decoded record -> InFlightRequest -> VoiceBatcher lane -> a dispatcher hands
`request` and a `Received` stamp to the processor -> retryable failure: `attempt` and
`first_failure` move on and it goes back in the queue -> answered: the Checkpoint marks its
offset done. (Named for what it is; a `Job` in this product is a video script.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

from consumers.worker.chunks import ChunkStream
from topics.events import SynthesisRequest


@dataclass
class InFlightRequest:
    record: ConsumerRecord[bytes, bytes]
    tp: TopicPartition
    request: SynthesisRequest
    stamp: datetime  # the record's broker timestamp: when the request was received
    attempt: int = 1
    first_failure: float | None = None  # monotonic time of the first retryable failure
    consumed_at: float = field(default_factory=time.monotonic)  # taken off its topic
    stream: ChunkStream | None = None  # a streamed request's current attempt (streams.py)

    def ctx(self) -> dict[str, Any]:
        """The log fields every line about this request carries."""
        return {"partition": self.tp.partition, "offset": self.record.offset,
                "request_id": self.request.request_id, "voice_id": self.request.voice_id}
