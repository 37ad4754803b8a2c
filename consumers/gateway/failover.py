"""Fast failover for callers: a streamed request whose worker left the fleet view before
its first chunk is produced again, same request_id, to another worker's shard.

    Gateway.produce -> track(request, route, headers) -> every `poll_s`:
        a chunk arrived (ReplyRouter.chunks_of) -> forgotten: it is being answered
        older than `after_s` and its worker no longer alive in the view (FleetRouter.alive:
        no status for three intervals, or draining) -> RoutedSender.send(avoid=every
        worker tried) -> the new route tracked; vf_gateway_failovers_total
    Gateway.finished -> forget(request_ids)

Why only a dead worker and not a slow one: a crashed worker's partitions wait for the
group's session timeout (10-30 s) before another member takes them, and its requests with
them; a slow worker's requests would only add load where load is the problem. The first
answer wins: the reply stream takes the first chunk of each sequence number (ReplyStream),
and when the old record is delivered again after the rebalance its worker finds the stored
object and replays it (pipeline/streaming.py), so the duplicate result on tts.results
carries the same request_id and the same audio.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from consumers.fleet.router import Route
from consumers.fleet.sending import RoutedSender
from topics.events import SynthesisRequest

log = logging.getLogger(__name__)


@dataclass
class _Tracked:
    request: SynthesisRequest
    route: Route
    headers: Sequence[tuple[str, bytes]]
    since: float
    tried: set[str] = field(default_factory=set)


class Failover:
    def __init__(self, sender: RoutedSender, *, chunks_of: Callable[[str], int],
                 after_s: float, on_failover: Callable[[], None] = lambda: None,
                 poll_s: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sender = sender
        self._chunks_of = chunks_of
        self._after_s = after_s
        self._on_failover = on_failover
        self._poll_s = poll_s
        self._tracked: dict[str, _Tracked] = {}
        self.failovers = 0

    def track(self, request: SynthesisRequest, route: Route,
              headers: Sequence[tuple[str, bytes]]) -> None:
        if route.worker is None:  # no view, nobody to tell dead from alive
            return
        self._tracked[request.request_id] = _Tracked(request, route, headers, self._clock(),
                                                     tried={route.worker})

    def forget(self, request_ids: Iterable[str]) -> None:
        for request_id in request_ids:
            self._tracked.pop(request_id, None)

    @property
    def tracked(self) -> int:
        return len(self._tracked)

    async def check(self) -> int:
        """One round: re-send what waits on a gone worker; returns how many were re-sent."""
        router = self._sender.router
        if router is None:
            return 0
        now, moved = self._clock(), 0
        for request_id, t in list(self._tracked.items()):
            if self._chunks_of(request_id) > 0:
                self._tracked.pop(request_id, None)
                continue
            if now - t.since < self._after_s or router.alive(t.route.worker):
                continue
            route = self._sender.route(t.request, avoid=t.tried)
            if route.worker is None or route.worker in t.tried:
                continue  # no other live worker yet: try again next round
            try:
                route, _ack = await self._sender.send(t.request, headers=t.headers,
                                                      avoid=t.tried)
            except Exception as exc:  # the broker is away: the next round tries again
                log.warning("failover of %s not produced: %s", request_id, exc)
                continue
            log.info("worker %s left the fleet view before answering: %s sent again to %s "
                     "(key %s)", t.route.worker, request_id, route.worker, route.key,
                     extra={"request_id": request_id, "voice_id": t.request.voice_id})
            t.route, t.since = route, self._clock()
            if route.worker is not None:
                t.tried.add(route.worker)
            self.failovers += 1
            moved += 1
            self._on_failover()
        return moved

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the loop: callers rely on it
                log.exception("failover round failed")
