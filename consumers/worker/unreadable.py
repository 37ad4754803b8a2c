"""Records the Kafka client cannot parse: answered on the DLQ, their partition moved past them.

Kafka header names are strings, but a librdkafka producer (kcat, confluent-kafka) writes any
bytes there; aiokafka decodes each name as UTF-8 while it unpacks a fetched batch and raises
UnicodeDecodeError out of getmany(), which names no partition. Left alone this repeats on
every fetch: aiokafka keeps that partition's position at the start of the batch and fetches
it again. Worse, records of other partitions drained earlier in the same getmany() call were
taken (their positions advanced) and then dropped with the exception.

    fetch loop: getmany() raises UnicodeDecodeError -> UnreadableRecords.recover(exc):
      1. the partition: the `tp` of aiokafka's fetch frames in the traceback
      2. every other assigned partition seeks back to where this worker's records of it
         end (Checkpoint.resume_offset; else the group's committed offset; else the
         beginning, as auto_offset_reset=earliest does), so nothing drained is lost
      3. the partition itself seeks there too and is read one record at a time: each record
         before the unreadable one is taken as usual (`accept`); the read that raises
         leaves the position exactly on the unreadable offset
      4. `dead_letter(tp, offset, why)` answers that offset on the DLQ (no bytes: the client
         cannot give them; its topic/partition/offset say where to read them with kcat),
         and the partition seeks past it; its offset commits like any answered one
If the partition cannot be told from the traceback (another aiokafka), the error is logged
and the loop goes on: the partition stalls as before, and says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition

log = logging.getLogger(__name__)

MAX_STEPS = 100_000  # records read one by one before the unreadable one: a fetch's worth
STEP_TIMEOUT_MS = 1000
RECOVERY_S = 20.0  # within the fetch loop's 30 s liveness bound

Accept = Callable[[TopicPartition, ConsumerRecord[bytes, bytes]], None]
DeadLetterAt = Callable[[TopicPartition, int, str], None]


def failing_partition(exc: BaseException) -> TopicPartition | None:
    """The partition aiokafka was unpacking when `exc` was raised: the innermost `tp` of its
    fetcher's frames."""
    found = None
    tb: TracebackType | None = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        tp = frame.f_locals.get("tp")
        if "aiokafka" in frame.f_code.co_filename and isinstance(tp, TopicPartition):
            found = tp
        tb = tb.tb_next
    return found


class UnreadableRecords:
    def __init__(self, *, consumer: Any, resume: Callable[[TopicPartition], int | None],
                 accept: Accept, dead_letter: DeadLetterAt,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._consumer = consumer
        self._resume = resume
        self._accept = accept
        self._dead_letter = dead_letter
        self._clock = clock
        self.answered = 0  # unreadable records answered on the DLQ

    async def recover(self, exc: UnicodeDecodeError) -> bool:
        """Steps 1-4 above; False when the partition could not be found or the unreadable
        record not reached in time (the next fetch raises again and recovery starts over)."""
        tp = failing_partition(exc)
        if tp is None:
            log.error("a fetched record cannot be decoded (%s) and aiokafka did not say "
                      "which partition it is on; that partition stalls", exc)
            return False
        consumer = self._consumer
        for other in consumer.assignment():  # 2 (the failing one too: step 3 starts there)
            await self._seek_back(other)
        deadline = self._clock() + RECOVERY_S
        for _ in range(MAX_STEPS):  # 3
            if self._clock() > deadline:
                break
            try:
                batch = await consumer.getmany(tp, timeout_ms=STEP_TIMEOUT_MS, max_records=1)
            except UnicodeDecodeError as again:
                offset = await consumer.position(tp)
                why = (f"invalid_json: the record cannot be read by the worker's Kafka client "
                       f"({again}; a header name that is not UTF-8?); read it with kcat -C "
                       f"-t {tp.topic} -p {tp.partition} -o {offset} -c 1")
                log.warning("unreadable record to the DLQ, partition moved past it: %s", again,
                            extra={"topic": tp.topic, "partition": tp.partition,
                                   "offset": offset})
                self._dead_letter(tp, offset, why)  # 4
                consumer.seek(tp, offset + 1)
                self.answered += 1
                return True
            for rec in batch.get(tp, []):
                self._accept(tp, rec)
        log.warning("the unreadable record of %s was not reached within %.0f s; trying again",
                    tp, RECOVERY_S)
        return False

    async def _seek_back(self, tp: TopicPartition) -> None:
        offset = self._resume(tp)
        if offset is None:
            meta = await self._consumer.committed(tp)
            offset = None if meta is None or meta < 0 else int(meta)
        if offset is None:
            await self._consumer.seek_to_beginning(tp)
        else:
            self._consumer.seek(tp, offset)
