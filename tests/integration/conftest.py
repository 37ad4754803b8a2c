"""Session fixtures for the integration suite: the real local stack, isolated per test.

The stack (Apache Kafka + Versity S3 Gateway on 127.0.0.1) is started once per session by
the project's own `deploy.local.stack.up()` and stopped at the end if this session started
it. Each test gets its own topic prefix (topics created with the DESIGN.md specs) and the
session gets its own bucket, so tests never see each other's messages.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from aiokafka.errors import KafkaError
from minio import Minio

from bench.scratch import delete_under, make_under
from consumers.settings import KafkaSettings, Secret, Settings, StoreSettings, WorkerSettings
from consumers.wiring import build_worker
from deploy.local import stack
from topics.specs import ALL_TOPICS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def local_stack() -> Iterator[None]:
    already = all(s.answering() for s in stack.SERVICES)
    if not already:
        stack.up(out=sys.stderr, timeout_s=180)
    yield
    if not already:
        stack.down()


@pytest.fixture(scope="session")
def bucket(local_stack: None) -> str:
    name = f"vf-test-{uuid.uuid4().hex[:8]}"
    client = Minio(f"127.0.0.1:{stack.S3_PORT}", access_key=stack.S3_ACCESS_KEY,
                   secret_key=stack.S3_SECRET_KEY, secure=False)
    client.make_bucket(name)
    return name


@pytest.fixture
async def settings(bucket: str) -> AsyncIterator[Settings]:
    """Fresh topics under a prefix of the test's own, deleted again after the test: the
    suite makes a few hundred sets of eight topics, and a broker that keeps them all runs
    out of file descriptors ("Too many open files" with 20,000 allowed)."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    result = Settings(
        kafka=KafkaSettings(bootstrap=f"127.0.0.1:{stack.KAFKA_PORT}", topic_prefix=prefix),
        store=StoreSettings(endpoint=f"http://127.0.0.1:{stack.S3_PORT}",
                            access_key=stack.S3_ACCESS_KEY,
                            secret_key=Secret(stack.S3_SECRET_KEY), bucket=bucket),
        worker=WorkerSettings(group_id=f"vf-synth-{prefix}", instance_id=f"test-{prefix}",
                              metrics_port=0, metrics_host="127.0.0.1",
                              session_timeout_ms=10_000))
    await make_under(result.kafka, prefix, ALL_TOPICS)
    yield result
    try:
        await delete_under(result.kafka, [prefix])
    except KafkaError as exc:  # best effort: a test that stopped the broker may leave them
        print(f"topics of {prefix} not deleted: {exc}", file=sys.stderr)


class RunningWorker:
    """`build_worker`'s worker (the CLI's objects) as a task on the test's event loop."""

    def __init__(self, settings: Settings) -> None:
        self.runtime = build_worker(settings, retry_base_s=0.05)
        self.worker = self.runtime.worker
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunningWorker:
        self.task = asyncio.create_task(self.worker.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop()
        assert self.task is not None
        # The drain is bounded by VF_DRAIN_SECONDS (30); its producer's and consumer's stops
        # come after it, and on a loaded machine they took the stop past a 60 s bound once.
        done, _ = await asyncio.wait({self.task}, timeout=45)
        if not done:  # say where it waits before the rest of the bound (CI saw one hang)
            for task in asyncio.all_tasks():
                print(f"worker stop slow, task {task.get_name()}: {task}", file=sys.stderr)
                task.print_stack(limit=8, file=sys.stderr)
        await asyncio.wait_for(self.task, 75)


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[RunningWorker]:
    async with RunningWorker(settings) as running:
        yield running


@pytest.fixture
def voice(settings: Settings, tmp_path: object) -> str:
    """A registered voice whose reference is a 4-5 s espeak-ng recording."""
    from pathlib import Path

    from consumers.clients.demo import REFERENCE_TEXT, make_reference
    from consumers.wiring import make_store
    from pipeline.voices import register_voice

    reference = make_reference(Path(str(tmp_path)) / "reference.wav")
    register_voice(make_store(settings.store), voice_id="narrator-1", reference=reference,
                   prompt_text=REFERENCE_TEXT, language="en")
    return "narrator-1"
