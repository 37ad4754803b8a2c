"""Producing requests by route: what the gateway, `job run` and the benchmarks share.

    RoutedSender.send(request) -> router.route(voice, lane) (or the plain voice_id when
        routing is off or the view is empty) -> producer.send(the lane's shard topic when
        the route is sharded, else its plain topic, value, key=routing key, partition=the
        route's) -> router.sent(request_id, route): counted at once; the route's reason
        counted in `reasons` and handed to `on_route` (the gateway's vf_gateway_routes_total)
    done(request_id): its answer came (or the caller gave up): no longer counted

`fleet_router(settings, producer)` builds the process's one router and its FleetView, sized
to the partitions the request topic really has (an operator may have grown it); `routed`
adds a sender for one lane on top, as `job run` needs.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from consumers.fleet.router import FleetRouter, Route
from consumers.fleet.view import FleetView
from consumers.settings import Settings
from topics.events import SynthesisRequest, encode
from topics.fleet import RouteLane, routing_key
from topics.specs import TopicNames, topic_names


class RoutedSender:
    def __init__(self, producer: Any, topic: str, lane: RouteLane,
                 router: FleetRouter | None, *, shard_topic: str | None = None,
                 balance: float | None = None, answer_follows: bool = True,
                 on_route: Callable[[RouteLane, str], None] | None = None) -> None:
        self._producer = producer
        self.topic = topic  # the plain lane: a route without a partition, or workers of before
        self.shard_topic = shard_topic or topic
        self.lane: RouteLane = lane
        self.router = router
        self.balance = balance
        self._answer_follows = answer_follows  # False: done() is never called for these
        self._on_route = on_route
        self.reasons: Counter[str] = Counter()  # routes sent, by reason (ROUTE_REASONS)

    def route(self, request: SynthesisRequest, avoid: Iterable[str] = ()) -> Route:
        if self.router is None:
            return Route(key=routing_key(request.voice_id), shard=0, partition=None,
                         worker=None)
        return self.router.route(request.voice_id, self.lane, avoid=avoid,
                                 balance=self.balance)

    async def send(self, request: SynthesisRequest, *,
                   headers: Sequence[tuple[str, bytes]] = (),
                   avoid: Iterable[str] = ()) -> tuple[Route, asyncio.Future[Any]]:
        """Queue one record; returns its route and the broker's acknowledgement future."""
        route = self.route(request, avoid)
        topic = self.shard_topic if route.sharded else self.topic
        future = await self._producer.send(topic, encode(request), key=route.key.encode(),
                                           partition=route.partition, headers=list(headers))
        if self.router is not None:
            self.router.sent(request.request_id, route, self.lane,
                             answer_follows=self._answer_follows)
        self.reasons[route.reason] += 1
        if self._on_route is not None:
            self._on_route(self.lane, route.reason)
        return route, future

    def done(self, request_ids: Iterable[str]) -> None:
        if self.router is not None:
            for request_id in request_ids:
                self.router.done(request_id)


async def fleet_router(settings: Settings,
                       producer: Any) -> tuple[FleetRouter | None, FleetView | None]:
    """The router and its started FleetView (the caller stops it); (None, None) when
    VF_ROUTING=voice. `producer` must be started: it tells the partition count."""
    if not settings.routing.fleet:
        return None, None
    names = topic_names(settings.kafka.topic_prefix)
    partitions = await producer.partitions_for(names.requests)
    router = FleetRouter(partitions=len(partitions), balance=settings.routing.balance,
                         home_queue=settings.routing.home_queue,
                         copy_share=settings.routing.copy_share)
    view = FleetView(settings.kafka, names.fleet, router)
    await view.start()
    return router, view


def lane_topics(names: TopicNames, lane: RouteLane) -> tuple[str, str]:
    """`lane`'s (plain topic, shard topic)."""
    if lane == "interactive":
        return names.requests_interactive, names.requests_interactive_shards
    return names.requests, names.requests_shards


def lane_sender(producer: Any, names: TopicNames, lane: RouteLane, router: FleetRouter | None,
                *, balance: float | None = None, answer_follows: bool = True,
                on_route: Callable[[RouteLane, str], None] | None = None) -> RoutedSender:
    plain, shards = lane_topics(names, lane)
    return RoutedSender(producer, plain, lane, router, shard_topic=shards, balance=balance,
                        answer_follows=answer_follows, on_route=on_route)


async def routed(settings: Settings, producer: Any, lane: RouteLane, *,
                 balance: float | None = None) -> tuple[RoutedSender, FleetView | None]:
    """A sender for `lane`'s topics over a router of its own (see fleet_router)."""
    router, view = await fleet_router(settings, producer)
    names = topic_names(settings.kafka.topic_prefix)
    return lane_sender(producer, names, lane, router, balance=balance), view
