"""`voicefactory bench assignors`: how many partitions (voices) change owner when one of N
workers leaves and comes back, per assignment strategy, on the real broker.

For each strategy: N consumers join a fresh copy of `tts.requests` -> settle -> one leaves
(dynamic membership: LeaveGroup) -> settle -> it rejoins -> settle. A moved partition is a
voice whose profiles go cold on its new worker (the leaver's own partitions must move and are
not counted on leave). A last row restarts one static member (group.instance.id) within the
session timeout, which should move nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.scratch import scratch_topics
from consumers.kafka import assignors, make_consumer
from consumers.settings import Settings
from topics.specs import REQUESTS

Assignment = dict[int, str]  # partition -> member name


@dataclass(frozen=True)
class AssignorResult:
    strategy: str
    static: bool
    moved_on_leave: int
    moved_on_rejoin: int
    partitions: int
    settle_s: float

    @property
    def moved_fraction(self) -> float:
        return (self.moved_on_leave + self.moved_on_rejoin) / (2 * self.partitions)


def _moved(before: Assignment, after: Assignment, ignore: str | None = None) -> int:
    """Partitions whose owner changed, not counting those of the member that left."""
    return sum(1 for p, owner in before.items()
               if owner != ignore and after.get(p) != owner)


async def _settle(members: dict[str, Any], partitions: int, timeout_s: float = 60) -> Assignment:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        # Keep every member polling: an idle aiokafka consumer does not rejoin.
        await asyncio.gather(*(c.getmany(timeout_ms=100) for c in members.values()))
        owned = {p.partition: name for name, c in members.items() for p in c.assignment()}
        total = sum(len(c.assignment()) for c in members.values())
        if len(owned) == partitions and total == partitions and all(
                c.assignment() for c in members.values()):
            return owned
    raise TimeoutError("the group did not settle")


async def measure(settings: Settings, strategy: str, *, workers: int = 4,
                  static: bool = False) -> AssignorResult:
    async with scratch_topics(settings.kafka, f"bench-assignors-{uuid.uuid4().hex[:6]}.",
                              (REQUESTS,)) as prefix:
        return await _measure(settings, prefix, strategy, workers=workers, static=static)


async def _measure(settings: Settings, prefix: str, strategy: str, *, workers: int,
                   static: bool) -> AssignorResult:
    topic, group = prefix + REQUESTS.name, f"{prefix}group"

    def member(name: str) -> Any:
        return make_consumer(settings.kafka, topic, group_id=group, enable_auto_commit=False,
                             partition_assignment_strategy=assignors(strategy),
                             group_instance_id=name if static else None,
                             session_timeout_ms=30_000, heartbeat_interval_ms=1000)

    members = {f"w{i}": member(f"w{i}") for i in range(workers)}
    started = time.monotonic()
    for consumer in members.values():
        await consumer.start()
    try:
        first = await _settle(members, REQUESTS.partitions)
        settle_s = time.monotonic() - started
        leaving = members.pop("w0")
        await leaving.stop()
        if static:  # a static member's restart: back before the session timeout
            members["w0"] = member("w0")
            await members["w0"].start()
            second = await _settle(members, REQUESTS.partitions)
            return AssignorResult(strategy, True, _moved(first, second), 0,
                                  REQUESTS.partitions, settle_s)
        second = await _settle(members, REQUESTS.partitions)
        members["w0"] = member("w0")
        await members["w0"].start()
        third = await _settle(members, REQUESTS.partitions)
        return AssignorResult(strategy, False, _moved(first, second, ignore="w0"),
                              _moved(second, third), REQUESTS.partitions, settle_s)
    finally:
        for consumer in members.values():
            await consumer.stop()


async def run_all(settings: Settings) -> list[AssignorResult]:
    # Not "sticky": aiokafka's StickyPartitionAssignor keeps its previous assignment in class
    # attributes, so several members in one process corrupt each other's state (it logs
    # "assigned to multiple consumers"); it can only be measured one process per member.
    results = [await measure(settings, s) for s in ("range", "roundrobin")]
    results.append(await measure(settings, "range", static=True))
    return results


def table(results: list[AssignorResult]) -> str:
    lines = ["| strategy | membership | moved when 1 of 4 leaves | moved when it rejoins | "
             "fraction of partitions moved |", "|---|---|---|---|---|"]
    for r in results:
        kind = "static, restart within session timeout" if r.static else "dynamic"
        rejoin = "-" if r.static else str(r.moved_on_rejoin)
        lines.append(f"| {r.strategy} | {kind} | {r.moved_on_leave} of {r.partitions} | "
                     f"{rejoin} | {r.moved_fraction:.2f} |")
    return "\n".join(lines)
