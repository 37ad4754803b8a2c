"""`voicefactory say`: one request, then its audio, whole or streamed.

Whole (default): produce -> wait for the result on tts.results (produce.request_and_wait)
-> download the stored object.

Streamed (`--stream`): the request's tts.audio partition (murmur2 of the request_id, as
the worker's producer picks it) is assigned and its end offset taken *before* the request
is produced with `"stream": true` -> records of that partition with our key, in order ->
a chunk of a new attempt (a retry, or a redelivery after a worker died) restarts the
output, since seq starts at 0 again -> PCM appended to the file as it arrives (WAV: the
header's sizes are rewritten after every chunk, so the file plays at any moment; `.raw`
or `.pcm`: bare s16le) -> the final record ends it: its status is the answer, the exit
code 0 only for `succeeded`. Prints the time to the first chunk and the total.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from consumers.clients.produce import request_and_wait, request_topic
from consumers.kafka import make_consumer, make_producer
from consumers.settings import Settings
from pipeline.encode import wav_header
from topics.chunks import InvalidChunk, read_chunk
from topics.events import SynthesisRequest, encode
from topics.partitioning import partition_for
from topics.specs import topic_names

EXIT_OK, EXIT_FAIL = 0, 1


def say(settings: Settings, request: SynthesisRequest, *, out: str | None, timeout_s: float,
        stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr,
        interactive: bool = False) -> int:
    """The command: exit code 0 when the request succeeded and its audio is written."""
    if request.stream:
        path = Path(out or f"{request.request_id}.wav")
        report = asyncio.run(listen(settings, request, path, timeout_s=timeout_s,
                                    stdout=stdout, interactive=interactive))
        if report.status != "succeeded":
            print(f"{report.status}: {report.error or ''}", file=stderr)
            return EXIT_FAIL
        print(f"{report.seconds:.2f} s in {report.chunks} chunks -> {path}; first chunk "
              f"after {report.first_chunk_s * 1000:.0f} ms, all in {report.total_s:.2f} s",
              file=stdout)
        return EXIT_OK
    from consumers.wiring import make_store

    [result] = asyncio.run(request_and_wait(settings, [request], timeout_s=timeout_s,
                                            interactive=interactive)).values()
    if result.status != "succeeded" or result.audio is None:
        err = result.error
        print(f"{result.status}: {err.code if err else ''}: {err.message if err else ''}",
              file=stderr)
        return EXIT_FAIL
    target = Path(out or f"{request.request_id}.{request.format}")
    target.write_bytes(make_store(settings.store).get(result.audio.key) or b"")
    print(f"{result.audio.duration_s:.2f} s -> {target} (s3://{result.audio.bucket}/"
          f"{result.audio.key})", file=stdout)
    return EXIT_OK


@dataclass
class StreamReport:
    status: str
    error: str | None
    first_chunk_s: float  # request produced -> first chunk read
    total_s: float  # request produced -> final record read
    chunks: int  # of the attempt that answered
    attempts: list[str]  # every attempt seen, in order
    seconds: float  # of audio written


class PcmFile:
    """The output, rewritten from scratch when a new attempt starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wav = path.suffix.lower() not in (".raw", ".pcm")
        self._file: BinaryIO | None = None
        self.rate = 0
        self.size = 0

    def restart(self, rate: int) -> None:
        self.close()
        self._file = open(self.path, "wb")  # noqa: SIM115 (kept open across chunks)
        self.rate, self.size = rate, 0
        self._header()

    def write(self, pcm: bytes) -> None:
        assert self._file is not None, "restart() first"
        self._file.seek(0, 2)
        self._file.write(pcm)
        self.size += len(pcm)
        self._header()
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _header(self) -> None:
        if not self.wav or self._file is None:
            return
        self._file.seek(0)
        self._file.write(wav_header(self.size, self.rate))


async def listen(settings: Settings, request: SynthesisRequest, path: Path, *,
                 timeout_s: float, stdout: TextIO = sys.stdout,
                 interactive: bool = False) -> StreamReport:
    """Produce `request` (stream=true; to the interactive lane with `interactive`) and write
    its chunks to `path` as they arrive."""
    names = topic_names(settings.kafka.topic_prefix)
    consumer = make_consumer(settings.kafka, enable_auto_commit=False, group_id=None)
    producer = make_producer(settings.kafka)
    output = PcmFile(path)
    await consumer.start()
    await producer.start()
    try:
        try:
            partitions = await producer.partitions_for(names.audio)  # waits for metadata
        except KafkaError as exc:
            raise RuntimeError(f"topic {names.audio}: {exc}; `voicefactory topics create` "
                               "makes it") from exc
        tp = TopicPartition(names.audio, partition_for(request.request_id, len(partitions)))
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)  # resolved now, before the request exists
        started = time.monotonic()
        await producer.send_and_wait(request_topic(settings, interactive=interactive),
                                     encode(request), key=request.voice_id.encode())
        return await _follow(consumer, request.request_id, output, started,
                             started + timeout_s, stdout)
    finally:
        output.close()
        await consumer.stop()
        await producer.stop()


async def _follow(consumer: object, request_id: str, output: PcmFile, started: float,
                  deadline: float, stdout: TextIO) -> StreamReport:
    key = request_id.encode()
    attempts: list[str] = []
    first = 0.0
    chunks = 0
    while time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=200)  # type: ignore[attr-defined]
        for records in batches.values():
            for rec in records:
                if rec.key != key:
                    continue
                try:
                    chunk = read_chunk(rec.key, rec.value, rec.headers)
                except InvalidChunk as exc:
                    print(f"skipped a record: {exc}", file=stdout)
                    continue
                if not attempts or chunk.attempt != attempts[-1]:
                    if attempts:
                        print(f"attempt {chunk.attempt} started over (was {attempts[-1]}): "
                              "restarting the output", file=stdout)
                    attempts.append(chunk.attempt)
                    output.restart(chunk.sample_rate or output.rate)
                    chunks = 0
                if chunk.data:
                    if not first:
                        first = time.monotonic() - started
                        print(f"first chunk after {first * 1000:.0f} ms", file=stdout)
                    output.write(chunk.data)
                    chunks += 1
                if chunk.final:
                    seconds = output.size / 2 / output.rate if output.rate else 0.0
                    return StreamReport(status=chunk.status or "failed", error=chunk.error,
                                        first_chunk_s=first,
                                        total_s=time.monotonic() - started, chunks=chunks,
                                        attempts=attempts, seconds=seconds)
    raise TimeoutError(f"no final audio record for {request_id} within the timeout; is a "
                       "worker running (`voicefactory worker`)?")
