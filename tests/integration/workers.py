"""Helpers for fault tests: worker subprocesses, request floods, answers read back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from consumers.settings import Settings
from tests.integration.test_worker import _read_all
from topics.events import SynthesisRequest, SynthesisResult, decode_result, encode
from topics.specs import topic_names

REPO = Path(__file__).resolve().parents[2]


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """This process's environment, every VF_* value of `settings`, then `extra`."""
    return {**os.environ, **settings.to_env(), **extra}


def start_worker(settings: Settings, instance: str, log: Path,
                 **extra: str) -> subprocess.Popen[bytes]:
    env = worker_env(settings, VF_INSTANCE_ID=instance, **extra)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "voicefactory", "worker"], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def make_requests(n: int, voices: int, prefix: str = "r") -> list[SynthesisRequest]:
    tag = uuid.uuid4().hex[:6]
    return [SynthesisRequest(request_id=f"{prefix}-{tag}-{i:05d}",
                             voice_id=f"voice-{i % voices:03d}",
                             text=f"Line number {i} for the fault test.", language="en")
            for i in range(n)]


async def produce(settings: Settings, requests: list[SynthesisRequest]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap, acks="all",
                                linger_ms=5)
    await producer.start()
    try:
        topic = topic_names(settings.kafka.topic_prefix).requests
        futures = [await producer.send(topic, encode(r), key=r.voice_id.encode())
                   for r in requests]
        for f in futures:
            await f
    finally:
        await producer.stop()


async def wait_for_answers(settings: Settings, wanted: set[str], timeout_s: float, *,
                           each: int = 1) -> list[SynthesisResult]:
    """Every result on tts.results once each of `wanted` has `each` answers there (more
    than one where several records share a request ID)."""
    deadline = time.monotonic() + timeout_s
    counts: Counter[str] = Counter()
    while time.monotonic() < deadline:
        results = [decode_result(v) for v in await _read_all(
            settings, topic_names(settings.kafka.topic_prefix).results, timeout_s=10)]
        counts = Counter(r.request_id for r in results)
        if all(counts[rid] >= each for rid in wanted):
            return results
    missing = {rid for rid in wanted if counts[rid] < each}
    raise AssertionError(f"{len(missing)} requests without {each} answers, "
                         f"e.g. {sorted(missing)[:5]}")


def duplicates(results: list[SynthesisResult]) -> int:
    return sum(c - 1 for c in Counter(r.request_id for r in results).values())


def dlq_records(values: list[bytes]) -> list[dict[str, object]]:
    return [orjson.loads(v) for v in values]
