"""bench.scratch's guards, which run before any broker is asked (the deletions themselves:
tests/integration/test_bench_scratch.py)."""

from __future__ import annotations

import pytest

from bench.scratch import delete_under
from consumers.settings import KafkaSettings

NO_BROKER = KafkaSettings(bootstrap="127.0.0.1:1")  # nothing listens: a connection would fail


async def test_no_prefixes_delete_nothing_and_ask_no_broker() -> None:
    assert await delete_under(NO_BROKER, []) == []


async def test_a_prefix_without_its_dot_is_refused_before_it_can_take_its_neighbours() -> None:
    with pytest.raises(ValueError, match=r"a topic prefix ends in '\.'"):
        await delete_under(NO_BROKER, ["bench-a.", "bench-a"])
