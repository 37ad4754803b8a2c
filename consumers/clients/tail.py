"""`voicefactory results tail`: every partition of `tts.results`, one line per result.

    tts.results (all partitions assigned, no group) --seek to the end or the beginning-->
      getmany -> decode_result -> result_line -> out, until interrupted, `limit` results, or
      `idle_s` seconds without one
"""

from __future__ import annotations

import time
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
    topic = topic_names(settings.kafka.topic_prefix).results
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None)
    await consumer.start()
    count = 0
    try:
        if topic not in await consumer.topics():
            raise RuntimeError(f"topic {topic} does not exist; run `voicefactory topics "
                               "create`")
        # The contract's count; `topics describe` reports a topic that drifted from it.
        tps = [TopicPartition(topic, p) for p in range(RESULTS.partitions)]
        consumer.assign(tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        last = time.monotonic()
        while limit is None or count < limit:
            if idle_s is not None and time.monotonic() - last > idle_s:
                break
            records = [r for batch in (await consumer.getmany(timeout_ms=250)).values()
                       for r in batch]
            for rec in records[:None if limit is None else limit - count]:
                out.write(result_line(decode_result(rec.value or b"{}")) + "\n")
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
