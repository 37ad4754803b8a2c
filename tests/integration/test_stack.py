"""The local stack itself: real processes, the DESIGN.md topics, idempotent `dev up`."""

from __future__ import annotations

import io
import subprocess
import time

import pytest

from consumers.settings import Settings
from deploy.local import stack
from topics.admin import admin_client, describe_topics, drift
from topics.specs import ALL_TOPICS

pytestmark = pytest.mark.integration


def test_real_servers_are_running(local_stack: None) -> None:
    ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True,
                        check=True).stdout
    assert any("kafka.Kafka" in line and "java" in line for line in ps.splitlines())
    assert any("versitygw" in line and "posix" in line for line in ps.splitlines())


def test_second_up_is_fast_and_changes_nothing(local_stack: None) -> None:
    if stack.KAFKA.pid() is None:
        pytest.skip("the running stack was started from another checkout")
    out = io.StringIO()
    started = time.monotonic()
    stack.up(out=out)
    elapsed = time.monotonic() - started
    assert elapsed < 5.0, f"second dev up took {elapsed:.1f} s"
    assert "kafka: already running" in out.getvalue()
    assert "s3: already running" in out.getvalue()


async def test_topics_match_the_design(settings: Settings) -> None:
    admin = admin_client(settings.kafka.bootstrap)
    await admin.start()
    try:
        states = await describe_topics(admin, prefix=settings.kafka.topic_prefix)
    finally:
        await admin.close()
    by_name = {s.name: s for s in states}
    for spec in ALL_TOPICS:
        state = by_name[settings.kafka.topic_prefix + spec.name]
        assert state.exists
        assert state.partitions == spec.partitions
        assert state.configs["cleanup.policy"] == spec.cleanup_policy
    assert drift(states, prefix=settings.kafka.topic_prefix) == []
