"""Records aiokafka cannot parse (unreadable.py): the error is aiokafka's own, raised by its
real record unpacking from a batch whose header name is not UTF-8; the consumer around it is
a stand-in that keeps positions the way aiokafka's do."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from consumers.worker.unreadable import UnreadableRecords, failing_partition
from tests.unit.consumers.worker.fakes import P0, P1, record


def unreadable_batch() -> bytes:
    """One record whose header name is the byte 0xff: Kafka allows it, aiokafka cannot
    decode it (CRCs are not checked here)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=None, key=b"k", value=b"\xff not json",
                   headers=[("Xname", b"v")])
    raw = bytearray(builder.build())
    raw[raw.find(b"Xname")] = 0xFF
    return bytes(raw)


def unpack(tp: TopicPartition) -> None:
    """aiokafka's own unpacking of the batch, for `tp`: raises UnicodeDecodeError."""
    records = PartitionRecords(tp, MemoryRecords(unreadable_batch()), [], 0, None, None,
                               False, 0)
    list(records)


def test_the_failing_partition_is_read_from_aiokafka_s_frames() -> None:
    with pytest.raises(UnicodeDecodeError) as raised:
        unpack(P1)
    assert failing_partition(raised.value) == P1
    assert failing_partition(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "elsewhere")) is None


@dataclass
class FetchingConsumer:
    """Per partition, a log of records (True: unreadable); getmany(tp, max_records=1) gives
    the record at the position and moves it, or raises aiokafka's error and leaves it."""

    logs: dict[TopicPartition, list[bool]]
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    group_committed: dict[TopicPartition, int] = field(default_factory=dict)

    def assignment(self) -> set[TopicPartition]:
        return set(self.logs)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.group_committed.get(tp)

    async def seek_to_beginning(self, tp: TopicPartition) -> None:
        self.positions[tp] = 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def getmany(self, *tps: TopicPartition, timeout_ms: int, max_records: int,
                      ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        [tp] = tps
        assert max_records == 1  # one by one, or records before the bad one are lost again
        offset = self.positions[tp]
        if offset >= len(self.logs[tp]):
            return {}
        if self.logs[tp][offset]:
            unpack(tp)
        self.positions[tp] = offset + 1
        return {tp: [record(offset, tp)]}


async def test_records_around_an_unreadable_one_are_taken_and_it_is_dead_lettered() -> None:
    # P0: records 0, 1 were drained with the failing call and dropped by aiokafka (its
    # position is 4 now, this worker never saw them); 2 is unreadable; 3 follows.
    # P1: this worker took 0-4, aiokafka drained 5-6 in the failing call and dropped them.
    consumer = FetchingConsumer(logs={P0: [False, False, True, False], P1: [False] * 7},
                                positions={P0: 0, P1: 7}, group_committed={P1: 2})
    taken: list[tuple[int, int]] = []
    letters: list[tuple[TopicPartition, int, str]] = []
    guard = UnreadableRecords(
        consumer=consumer, resume={P1: 5}.get,
        accept=lambda tp, rec: taken.append((tp.partition, rec.offset)),
        dead_letter=lambda tp, offset, why: letters.append((tp, offset, why)))
    with pytest.raises(UnicodeDecodeError) as first:
        unpack(P0)
    assert await guard.recover(first.value)
    assert taken == [(0, 0), (0, 1)]
    [(tp, offset, why)] = letters
    assert (tp, offset) == (P0, 2)
    assert why.startswith("invalid_json:") and f"-p {P0.partition} -o 2" in why
    assert consumer.positions == {P0: 3, P1: 5}  # past the unreadable one; P1 from 5 again
    assert guard.answered == 1


async def test_the_group_s_committed_offset_is_where_an_unseen_partition_resumes() -> None:
    consumer = FetchingConsumer(logs={P0: [True], P1: [False] * 9},
                                positions={P0: 0, P1: 9}, group_committed={P1: 6})
    guard = UnreadableRecords(consumer=consumer, resume=lambda tp: None,
                              accept=lambda tp, rec: None,
                              dead_letter=lambda tp, offset, why: None)
    with pytest.raises(UnicodeDecodeError) as first:
        unpack(P0)
    assert await guard.recover(first.value)
    assert consumer.positions == {P0: 1, P1: 6}


async def test_an_error_without_a_partition_is_logged_not_guessed(
        caplog: pytest.LogCaptureFixture) -> None:
    consumer = FetchingConsumer(logs={P0: [False]}, positions={P0: 1})
    guard = UnreadableRecords(consumer=consumer, resume=lambda tp: None,
                              accept=lambda tp, rec: None,
                              dead_letter=lambda tp, offset, why: None)
    caplog.set_level(logging.ERROR)
    assert not await guard.recover(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "x"))
    assert consumer.positions == {P0: 1}
    assert "did not say which partition" in caplog.text
