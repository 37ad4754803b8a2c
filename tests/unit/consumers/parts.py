"""Stand-in Kafka clients and servers that write their start and stop into one shared list.

Start-up and shutdown tests (worker, gateway, aggregator) hand every part the same `events`
list and assert its order: what started, what was stopped after a step failed, and in which
order a normal shutdown stops them. A part whose `fail` is set raises it from start() after
noting the attempt, as a half-started aiokafka client does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakePart:
    name: str
    events: list[str]
    fail: Exception | None = None  # raised by start()
    topics_found: set[str] = field(default_factory=set)  # what topics() answers
    subscribed: list[str] = field(default_factory=list)
    sent: asyncio.Event = field(default_factory=asyncio.Event)  # set by the first send()

    # -- lifecycle (aiokafka's start/stop, the admin client's close) ----------------------
    async def start(self, *_: Any, **__: Any) -> None:
        self.events.append(f"start {self.name}")
        if self.fail is not None:
            raise self.fail

    async def stop(self) -> None:
        self.events.append(f"stop {self.name}")

    async def close(self) -> None:
        self.events.append(f"stop {self.name}")

    # -- what a consumer is asked while starting and serving nothing ----------------------
    async def topics(self) -> set[str]:
        return set(self.topics_found)

    def subscribe(self, topics: list[str], listener: object = None) -> None:
        self.subscribed = list(topics)

    def assignment(self) -> set[Any]:
        return set()

    def paused(self) -> set[Any]:
        return set()

    def pause(self, *_: Any) -> None:
        pass

    def resume(self, *_: Any) -> None:
        pass

    def highwater(self, _tp: Any) -> int | None:
        return None

    def partitions_for_topic(self, _topic: str) -> set[int] | None:
        return None

    async def getmany(self, *_: Any, timeout_ms: int = 0, **__: Any) -> dict[Any, Any]:
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    async def commit(self, _offsets: Any = None) -> None:
        pass

    # -- what a producer is asked -----------------------------------------------------------
    async def partitions_for(self, _topic: str) -> set[int]:
        return set(range(12))

    async def send(self, topic: str, _value: bytes | None, **_: Any) -> asyncio.Future[None]:
        self.events.append(f"send {topic}")
        self.sent.set()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def send_and_wait(self, topic: str, value: bytes | None, **_: Any) -> None:
        self.events.append(f"tombstone {topic}" if value is None else f"send {topic}")
