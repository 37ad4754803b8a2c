"""A bench's topics go when it ends, by prefix: what a process of its made on the way (faust's
changelogs) too, and nothing under a neighbouring prefix."""

from __future__ import annotations

import uuid

import pytest
from aiokafka.admin import NewTopic

from bench.scratch import delete_under, scratch_topics
from consumers.settings import Settings
from topics.admin import admin_client
from topics.specs import REQUESTS

pytestmark = pytest.mark.integration


async def _topics(settings: Settings) -> set[str]:
    admin = admin_client(settings.kafka.bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _make(settings: Settings, name: str) -> None:
    admin = admin_client(settings.kafka.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        await admin.close()


async def test_scratch_topics_leave_nothing_under_their_prefix_and_spare_a_neighbour(
        settings: Settings) -> None:
    run = f"bench-t{uuid.uuid4().hex[:6]}"
    neighbour = f"{run}0.tts.requests"  # "bench-tXXXXXX0." starts with "bench-tXXXXXX"
    await _make(settings, neighbour)
    try:
        async with scratch_topics(settings.kafka, f"{run}.", (REQUESTS,)) as prefix:
            await _make(settings, f"{prefix}vf-aggregator-usage-changelog")  # as faust does
            inside = await _topics(settings)
            assert {f"{prefix}tts.requests", f"{prefix}vf-aggregator-usage-changelog",
                    neighbour} <= inside
        after = await _topics(settings)
        assert not any(t.startswith(f"{run}.") for t in after)
        assert neighbour in after
    finally:
        await delete_under(settings.kafka, [f"{run}0."])
    assert neighbour not in await _topics(settings)
