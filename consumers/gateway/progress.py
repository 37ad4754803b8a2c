"""A running job's progress for `GET /v1/jobs/{id}`, read from its one tts.results partition.

Results of a job are keyed by its job ID, so they all sit in one partition. The script's
`created_at` (script.json) -> ListOffsets by timestamp gives the first offset that can hold
one of its results -> a group-less consumer reads from there to the end offset noted at the
start (never waiting for new records) -> one status per line index (the latest answer wins,
duplicates count once), with the error code of a line that did not succeed; only results of
the caller's tenant count (another tenant's job of the same ID shares the key). Bounded by
`limit_s`: a status call never hangs on a busy partition; it then says `complete: false`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from aiokafka import TopicPartition

from consumers.kafka import make_consumer, read_since
from consumers.settings import KafkaSettings
from topics.events import decode_result
from topics.partitioning import partition_for
from topics.specs import RESULTS
from topics.tenancy import tenant_of


@dataclass
class Progress:
    statuses: dict[int, str] = field(default_factory=dict)  # line index -> latest status
    codes: dict[int, str] = field(default_factory=dict)  # line index -> error code, if failed
    complete: bool = True  # False when the read stopped at limit_s

    def answer(self, index: int, status: str, code: str | None) -> None:
        """Line `index`'s latest answer: it replaces an earlier one, code included."""
        self.statuses[index] = status
        if status != "succeeded" and code:
            self.codes[index] = code
        else:
            self.codes.pop(index, None)

    def lines(self) -> list[tuple[int, str, str | None]]:
        """(index, status, error code or None) of each answered line, in line order: at most
        one per line of the script (10,000)."""
        return [(i, self.statuses[i], self.codes.get(i)) for i in sorted(self.statuses)]

    @property
    def done(self) -> int:
        return len(self.statuses)

    @property
    def succeeded(self) -> int:
        return sum(1 for s in self.statuses.values() if s == "succeeded")


async def job_progress(kafka: KafkaSettings, topic: str, job_id: str, created_at: str, *,
                       limit_s: float = 5.0, version: int = 1,
                       tenant: str | None = None) -> Progress:
    tp = TopicPartition(topic, partition_for(job_id, RESULTS.partitions))
    since_ms = int(datetime.fromisoformat(created_at).timestamp() * 1000) - 60_000  # clock skew
    consumer = make_consumer(kafka, group_id=None, enable_auto_commit=False)
    await consumer.start()
    progress = Progress()
    key = job_id.encode()

    async def read() -> None:
        batches = await consumer.getmany(tp, timeout_ms=200)
        for record in batches.get(tp, []):
            if record.key != key or not record.value:
                continue
            result = decode_result(record.value)
            if result.job is not None and result.job.id == job_id and \
                    tenant_of(result.tenant) == tenant_of(tenant) and \
                    (result.job.version or 1) == version:  # a revision counts its own lines
                progress.answer(result.job.index, result.status,
                                result.error.code if result.error is not None else None)

    try:
        consumer.assign([tp])
        # Nothing written since the job started: positioned at the end, nothing to read.
        progress.complete = await read_since(consumer, [tp], max(0, since_ms), limit_s=limit_s,
                                             read=read)
    finally:
        await consumer.stop()
    return progress
