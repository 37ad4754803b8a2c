"""One gateway replica's long-lived parts, started and stopped with the app's lifespan.

`Gateway.start()`, in this order: the producer (requests, cancels, voice events), the
`ReplyRouter` (this replica's partitions of tts.audio), the admin client and the
`LagSampler`, the fleet router and its view (consumers.fleet: where each request goes, one
sender per lane) with the `Failover` loop; the keys file is read at construction. Each
part's stop goes on one exit stack as it starts (consumers/startup.py), so a failed start
stops what had started and `stop()` stops everything in the reverse order. Routes reach it as
`request.app.state.gateway`. `produce` routes and sends; `finished` tells the router a
request's answer ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from consumers import kafka_access, startup
from consumers.fleet.sending import RoutedSender, fleet_router, lane_sender
from consumers.fleet.view import FleetView
from consumers.gateway.audit import Audit
from consumers.gateway.failover import Failover
from consumers.gateway.keys import KeyRing
from consumers.gateway.lag import LagSampler
from consumers.gateway.limits import Limiter
from consumers.gateway.metrics import GatewayMetrics
from consumers.gateway.replies import ReplyRouter
from consumers.gateway.usage import UsageBook
from consumers.kafka import make_producer, security_kwargs
from consumers.settings import Settings, process_name
from consumers.wiring import make_store
from pipeline import keys as object_keys
from pipeline.storage import ObjectStore
from pipeline.usage import report_source
from topics.admin import admin_client
from topics.chunks import REPLY_PARTITION
from topics.control import cancel, control_key
from topics.events import SynthesisRequest, encode
from topics.specs import REQUESTS_INTERACTIVE, REQUESTS_INTERACTIVE_SHARDS, topic_names
from topics.tenancy import scoped_id

log = logging.getLogger(__name__)

class Gateway:
    """One replica's long-lived parts: producer, reply router, lag sampler, keys, limits."""

    def __init__(self, settings: Settings, *, store: ObjectStore | None = None,
                 keyring: KeyRing | None = None) -> None:
        self.settings = settings
        self.names = topic_names(settings.kafka.topic_prefix)
        self.keys = keyring if keyring is not None else KeyRing(
            settings.gateway.keys_path(), reload_s=settings.gateway.keys_reload_s)
        self.limiter = Limiter()
        self.metrics = GatewayMetrics()
        self.store = store if store is not None else make_store(settings.store)
        self.usage = UsageBook(self.store, report_source(settings.kafka.topic_prefix),
                               ttl_s=settings.gateway.usage_cache_s)
        self.instance = process_name(settings.worker.instance_id)  # the console's replica
        self.router = ReplyRouter(settings.kafka, self.names.audio,
                                  group_id=settings.gateway.group_id)
        self.producer: AIOKafkaProducer | None = None
        # Routes call `await gw.audit.record(request, action, object_id)` (consumers/gateway/
        # audit.py); it writes with the producer once start() made it.
        self.audit = Audit(lambda: self.producer, self.names.audit,
                           on_record=self.metrics.on_audit)
        self._admin: AIOKafkaAdminClient | None = None  # made in start(): needs a loop
        self.lag = LagSampler(admin=lambda: self._admin, offsets=lambda: self.router.consumer,
                              topics=[(self.names.requests_interactive,
                                       REQUESTS_INTERACTIVE.partitions),
                                      (self.names.requests_interactive_shards,
                                       REQUESTS_INTERACTIVE_SHARDS.partitions)],
                              group_id=settings.worker.group_id,
                              interval_s=settings.gateway.lag_interval_s,
                              on_sample=self.metrics.set_lag)
        self._voices_seen: dict[str, float] = {}
        self.fleet: FleetView | None = None
        self.senders: dict[str, RoutedSender] = {}  # topic -> its lane's sender
        self.failover: Failover | None = None
        self._failover_task: asyncio.Task[None] | None = None
        self._parts = contextlib.AsyncExitStack()  # what start() started, for stop()

    async def start(self) -> None:
        """Start the parts in order, each one's stop put on one exit stack as it starts
        (consumers/startup.py): producer, reply router, admin client, lag sampler, fleet
        view, failover loop. A step that fails stops what had started, last first, and the
        error goes on to the app's lifespan (uvicorn then exits); stop() unwinds the stack.
        A refusal by Kafka (login, certificate, ACL) is logged first as one line saying
        which (consumers/kafka_access.py)."""
        try:
            await self._start_parts()
        except KafkaError as exc:
            line = await kafka_access.reason(exc, self.settings.kafka)
            if line is not None:
                log.error("gateway cannot start: %s", line)
            raise
        log.info("gateway started: %d key(s), reply group %s", len(self.keys),
                 self.settings.gateway.group_id)

    async def _start_parts(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            self.producer = make_producer(self.settings.kafka, linger_ms=0)
            await startup.start_part(stack, "producer", self.producer.start,
                                     self._stop_producer, logger=log)
            await startup.start_part(stack, "reply router", self.router.start,
                                     self.router.stop, logger=log)
            kafka = self.settings.kafka
            admin = self._admin = admin_client(kafka.bootstrap, **security_kwargs(kafka))
            await startup.start_part(stack, "admin client", admin.start, self._close_admin,
                                     logger=log)
            startup.push_stop(stack, "lag sampler", self.lag.stop, logger=log)
            self.lag.start()
            await self._start_routing(stack, self.producer)
            self._parts = stack.pop_all()  # the whole start-up worked: stop() unwinds it

    async def _start_routing(self, stack: contextlib.AsyncExitStack,
                             producer: AIOKafkaProducer) -> None:
        routing = self.settings.routing
        routes, self.fleet = await fleet_router(self.settings, producer)
        if self.fleet is not None:
            startup.push_stop(stack, "fleet view", self._stop_fleet, logger=log)
        if routes is not None:
            self.metrics.watch_fleet(routes)
        on_route = self.metrics.on_route
        interactive = lane_sender(producer, self.names, "interactive", routes,
                                  on_route=on_route)
        # Jobs' answers go to tts.results, which the gateway does not read: counted by the
        # router until the worker's next status includes them.
        self.senders = {
            self.names.requests_interactive: interactive,
            self.names.requests: lane_sender(producer, self.names, "batch", routes,
                                             balance=routing.job_balance,
                                             answer_follows=False, on_route=on_route)}
        if routes is not None and routing.failover_ms > 0:
            self.failover = Failover(interactive, chunks_of=self.router.chunks_of,
                                     after_s=routing.failover_ms / 1000,
                                     on_failover=self.metrics.on_failover)
            startup.push_stop(stack, "failover loop", self._stop_failover, logger=log)
            self._failover_task = startup.watch(
                asyncio.create_task(self.failover.run(), name="failover"), logger=log,
                what="gateway failover loop")

    async def stop(self) -> None:
        """Stop what start() started, in reverse: failover loop, fleet view, lag sampler,
        admin client, reply router, producer. A second call finds nothing to stop."""
        parts, self._parts = self._parts, contextlib.AsyncExitStack()
        await parts.aclose()

    async def _stop_failover(self) -> None:
        task, self._failover_task = self._failover_task, None
        await startup.cancel_and_wait(task)

    async def _stop_fleet(self) -> None:
        fleet, self.fleet = self.fleet, None
        if fleet is not None:
            await fleet.stop()

    async def _close_admin(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    async def _stop_producer(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None

    async def produce(self, topic: str, requests: list[SynthesisRequest],
                      partition: int | None = None) -> None:
        """Route and send `requests` to a lane topic, waiting for the acknowledgements;
        `partition` is the reply partition of tts.audio the chunks should go to."""
        assert self.producer is not None
        headers = [(REPLY_PARTITION, str(partition).encode())] if partition is not None else []
        sender = self.senders[topic]
        acks = []
        for request in requests:
            route, ack = await sender.send(request, headers=headers)
            acks.append(ack)
            if self.failover is not None and sender.lane == "interactive":
                self.failover.track(request, route, headers)
        await asyncio.gather(*acks)

    def finished(self, request_ids: list[str]) -> None:
        """A speech answer ended (or was given up): its requests no longer count as load."""
        self.senders[self.names.requests_interactive].done(request_ids)
        if self.failover is not None:
            self.failover.forget(request_ids)

    async def cancel(self, request_ids: list[str], reason: str, *,
                     tenant: str | None = None) -> None:
        if self.producer is None:
            return
        for request_id in request_ids:
            command = cancel(request_id=request_id, reason=reason, tenant=tenant)
            try:
                await self.producer.send_and_wait(self.names.control, encode(command),
                                                  key=control_key(command))
                self.metrics.on_cancel()
            except Exception as exc:  # the worker still answers; the cancel was an economy
                log.warning("cancel of %s not produced: %s", request_id, exc)
        log.info("cancelled %s: %s", ", ".join(request_ids), reason)

    async def voice_exists(self, voice_id: str, tenant: str | None = None) -> bool:
        """Whether the tenant has the voice (another tenant's of that ID: False)."""
        scoped = scoped_id(tenant, voice_id)
        seen = self._voices_seen.get(scoped)
        # A voice seen registered is trusted as long as a worker trusts a voice.json.
        if seen is not None and time.monotonic() - seen < self.settings.worker.voice_ttl_seconds:
            return True
        info = await asyncio.to_thread(self.store.stat,
                                       object_keys.voice_json_key(voice_id, tenant=tenant))
        if info is None:
            self._voices_seen.pop(scoped, None)
            return False
        self._voices_seen[scoped] = time.monotonic()
        return True

    def readiness(self) -> tuple[bool, dict[str, object]]:
        checks: dict[str, object] = {"producer": self.producer is not None,
                                     "reply_partitions": self.router.partitions,
                                     "keys": len(self.keys), "interactive_lag": self.lag.lag}
        return (self.producer is not None and bool(self.router.partitions)
                and self.keys.loaded), checks
