"""`voicefactory results tail` (and, through `follow_topic`, `audit tail`): every partition
of a topic, one line per record.

    the topic (all partitions assigned, no group) --seek to the end or the beginning-->
      getmany -> line_of (decode_result -> result_line) -> out, until interrupted, `limit`
      lines, or `idle_s` seconds without one
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from aiokafka import TopicPartition

from consumers.kafka import make_consumer
from consumers.settings import Settings
from topics.events import SynthesisResult, decode_result
from topics.specs import RESULTS, topic_names


async def tail_results(settings: Settings, *, from_beginning: bool, out: TextIO,
                       limit: int | None = None, idle_s: float | None = None) -> int:
    """`results tail`: one line per result on every partition, until interrupted (or
    `limit` results, or `idle_s` seconds without one). Returns the count printed."""
    return await follow_topic(
        settings, topic_names(settings.kafka.topic_prefix).results, RESULTS.partitions,
        lambda raw: result_line(decode_result(raw or b"{}")),
        from_beginning=from_beginning, out=out, limit=limit, idle_s=idle_s)


async def follow_topic(settings: Settings, topic: str, partitions: int,
                       line_of: Callable[[bytes | None], str | None], *, from_beginning: bool,
                       out: TextIO, limit: int | None = None,
                       idle_s: float | None = None) -> int:
    """Every partition of `topic` (no group), in timestamp order within a fetch: `line_of`
    each record's value, skipping None, until interrupted, `limit` lines, or `idle_s`
    seconds without one. Returns the count printed. `partitions` is the contract's count;
    `topics describe` reports a topic that drifted from it."""
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None)
    await consumer.start()
    count = 0
    try:
        if topic not in await consumer.topics():
            raise RuntimeError(f"topic {topic} does not exist; run `voicefactory topics "
                               "create`")
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        last = time.monotonic()
        while limit is None or count < limit:
            if idle_s is not None and time.monotonic() - last > idle_s:
                break
            batches = await consumer.getmany(timeout_ms=250)
            for record in sorted((r for b in batches.values() for r in b),
                                 key=lambda r: r.timestamp):
                line = line_of(record.value)
                if line is None or (limit is not None and count >= limit):
                    continue
                out.write(line + "\n")
                count += 1
                last = time.monotonic()
            out.flush()
    finally:
        await consumer.stop()
    return count


def result_line(result: SynthesisResult) -> str:
    job = f" job={result.job.id}#{result.job.index}/{result.job.total}" if result.job else ""
    if result.audio is not None:
        detail = f"{result.audio.duration_s:.2f}s s3://{result.audio.bucket}/{result.audio.key}"
    elif result.error is not None:
        detail = f"{result.error.code}: {result.error.message}"
    else:
        detail = "-"
    return (f"{result.completed_at} {result.status:<9} {result.request_id} "
            f"voice={result.voice_id}{job} {detail}")
