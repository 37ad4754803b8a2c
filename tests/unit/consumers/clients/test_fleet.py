"""`voicefactory fleet show` / `fleet route`: what they print from a router's statuses,
without Kafka (tests/integration/test_fleet_cli.py reads a real tts.fleet)."""

from __future__ import annotations

import io

import msgspec
import pytest

from consumers.clients.fleet import (
    FleetRouteAnswer,
    explain_route,
    route_lines,
    show,
    show_lines,
    spans,
    write,
)
from consumers.fleet.router import FleetRouter
from consumers.fleet.view import FleetView
from consumers.settings import KafkaSettings, Settings
from topics.fleet import LaneLoad, ProfileCounts, WorkerStatus
from topics.partitioning import partition_for

NOW_MS = 5_000_000


def status(worker: str, shards: list[int], *, inflight: int = 0, backlog: int = 0,
           hot: tuple[str, ...] = (), draining: bool = False,
           profiles: ProfileCounts | None = None,
           errors: dict[str, int] | None = None) -> WorkerStatus:
    lanes = {"batch": LaneLoad(partitions=[s // 4 for s in shards[::4]], topic_partitions=12,
                               shards=shards, shard_partitions=48, backlog=backlog,
                               inflight=inflight, slots=2),
             "interactive": LaneLoad(partitions=[s // 4 for s in shards[::4]],
                                     topic_partitions=12, shards=shards,
                                     shard_partitions=48, slots=3)}
    return WorkerStatus(worker=worker, at_ms=NOW_MS - 400, interval_ms=500, lanes=lanes,
                        hot=list(hot), draining=draining, profiles=profiles,
                        errors=errors or {})


def router_of(*statuses: WorkerStatus) -> FleetRouter:
    router = FleetRouter(partitions=12, wall_ms=lambda: NOW_MS)
    for s in statuses:
        router.apply(s)
    return router


def view_of(router: FleetRouter) -> FleetView:
    view = FleetView(KafkaSettings(), "tts.fleet", router)
    view.records = 7
    return view


@pytest.mark.parametrize(("numbers", "text"), [
    ([], "-"), ([3], "3"), ([0, 1, 2, 5, 7, 8], "0-2,5,7-8"), ([9, 1, 0, 1], "0-1,9"),
])
def test_partitions_print_as_ranges(numbers: list[int], text: str) -> None:
    assert spans(numbers) == text


def test_show_lists_each_worker_and_lane_with_the_fleets_totals() -> None:
    router = router_of(
        status("w0", list(range(24)), inflight=2, backlog=3, hot=("narrator",),
               profiles=ProfileCounts(hit=9, store=1), errors={"engine_error": 2}),
        status("w1", list(range(24, 48)), draining=True,
               profiles=ProfileCounts(hit=1, miss=1)))
    answer = show(router, view_of(router), now_ms=NOW_MS)
    assert [w.id for w in answer.workers] == ["w0", "w1"]
    assert answer.cache.hit_ratio == round(10 / 12, 4)
    assert [(c.code, c.count) for c in answer.errors_by_code] == [("engine_error", 2)]
    lines = show_lines(answer, Settings())
    assert lines[0].startswith("tts.fleet: 2 workers (1 live, 1 draining), 7 records read")
    w0 = next(line for line in lines if line.startswith("w0"))
    # RUNNING counts requests on the device and SLOTS the calls it runs at once: a batch of
    # 20 in one call reads "20 2", not a ratio over 1
    assert w0.split() == ["w0", "live", "0.4s", "batch", "0-5", "0-23", "3", "0", "2", "2",
                          "1", "0.9000", "engine_error", "2"]
    assert next(line for line in lines if line.startswith("w1")).split()[:2] == ["w1",
                                                                                 "draining"]
    # the totals count live workers only: the draining one takes nothing new
    assert "batch 5 waiting or running over 2 slots" in lines[-2]
    assert lines[-1].endswith("hit ratio 0.8333; failed results: engine_error 2")


def test_show_says_when_no_worker_was_heard() -> None:
    router = router_of()
    lines = show_lines(show(router, view_of(router), now_ms=NOW_MS), Settings())
    assert "no worker status within its last 3 intervals" in lines[-1]


def test_route_starts_at_the_home_a_plain_key_lands_on_and_marks_held_profiles() -> None:
    router = router_of(status("w0", list(range(24)), hot=("narrator",)),
                       status("w1", list(range(24, 48))))
    answer = explain_route(Settings(), router, "narrator", "batch")
    home = partition_for("narrator", 48)
    assert answer.topic == "tts.requests.shards" and answer.partitions == 48
    assert answer.order[0].shard == 0 and answer.order[0].partition == home
    assert answer.order[0].worker == ("w0" if home < 24 else "w1")
    assert {p.worker for p in answer.order} == {"w0", "w1"}
    assert [p.hot for p in answer.order] == [p.worker == "w0" for p in answer.order]
    assert answer.route.topic == "tts.requests.shards"
    # an idle fleet and a router with no traffic: the next request goes home
    assert (answer.route.worker, answer.route.reason) == (answer.order[0].worker, "home")
    text = "\n".join(route_lines(answer))
    assert f"home   narrator    {home}" in text
    assert (f"next request: key 'narrator' -> tts.requests.shards partition {home} "
            f"(worker {answer.order[0].worker}: its home)") in text


def test_route_without_workers_says_kafka_picks() -> None:
    answer = explain_route(Settings(), router_of(), "narrator", "interactive")
    assert answer.order == [] and answer.route.partition is None
    assert answer.topic == "tts.requests.interactive"
    assert "Kafka's partitioner picks" in route_lines(answer)[-1]


def test_json_is_one_object_of_the_answer() -> None:
    router = router_of(status("w0", list(range(48))))
    answer = explain_route(Settings(), router, "brand", "interactive")
    out = io.StringIO()
    write(answer, route_lines(answer), as_json=True, out=out)
    decoded = msgspec.json.decode(out.getvalue(), type=FleetRouteAnswer)
    assert decoded == answer and decoded.order[0].slots == 3
