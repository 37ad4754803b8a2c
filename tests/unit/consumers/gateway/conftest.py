"""Fixtures the gateway's route tests share."""

from __future__ import annotations

import pytest

from consumers.gateway.runtime import Gateway
from topics.events import SynthesisRequest


@pytest.fixture
def produced(gateway: Gateway) -> list[SynthesisRequest]:
    """What the test module's `gateway` would produce, kept in a list instead of Kafka."""
    out: list[SynthesisRequest] = []

    async def produce(topic: str, requests: list[SynthesisRequest],
                      partition: int | None = None) -> None:
        out.extend(requests)

    gateway.produce = produce  # type: ignore[method-assign]
    return out
