"""The job aggregator: `tts.results` -> a faust table of job states -> one `tts.job.v1`.

    tts.results (key job.id) --agent--> merge into table["jobs"][job_id]
                                        (a revision's first result: seeded from its
                                         jobs/{id}/v{N}/script.json, state.open_version)
                                            |  changelog: {app id}-jobs-changelog (compact)
                     complete, or silent    v
                     for the timeout  --> JobEmitter: subtitles.srt [+ track] -> job.json
                     (agent or timer)         -> tts.jobs (key job_id) -> table: emitted

The table is faust's in-memory store, rebuilt from its changelog topic when the process
starts or takes over partitions, so a restarted aggregator knows every open job. faust
commits `tts.results` offsets at least once: after a crash the results since the last
commit are merged again, which the merge rules make harmless (`aggregator_state`).

Exactly one event per job: the agent and the timer close jobs under one lock, a closed job
becomes an `emitted` marker in the table, and `JobEmitter` checks the store's outbox note
plus the topic itself before producing, which covers a crash between the broker's ack and
the marker. What remains (docs/jobs.md): two live aggregators owning one partition at once.

Metrics (`AggregatorMetrics`, served at /metrics next to /healthz and /readyz): the agent
counts each record by what the merge did, `_close` each emit and error, and the timer's
sweep sets the open-job and marker gauges while it walks the table anyway.

Usage (consumers/aggregator/metering.py): the agent also counts every successful result
into a second table, a ledger keyed by request ID, whose totals a timer publishes per tenant
and month to the store (docs/usage.md).

Timer writes need a partition without a current event, so the table uses the producer's
partitioner: murmur2 of the job ID, which is the same partition that job's results have.

Start-up and shutdown: faust's worker starts and stops the app (consumer, table, agent,
timer, pages). The only clients this object starts are the emitter's, on the first close;
their stops go on one exit stack (consumers/startup.py), so a failed start stops what had
started and `_on_shutdown` stops the rest in reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import faust
from faust.types import TP
from faust.web import Request, Response, View

from consumers import startup
from consumers.aggregator.emit import JobEmitter
from consumers.aggregator.metering import UsageMeter
from consumers.aggregator.metrics import AggregatorMetrics
from consumers.aggregator.state import (
    JobState,
    decode_manifest,
    decode_state,
    emitted_marker,
    encode_state,
    job_id_of,
    merge_result,
    needs_opening,
    open_version,
    ready,
    result_version,
    table_key,
)
from consumers.kafka import make_producer, security_kwargs
from consumers.settings import KafkaSettings, Settings
from pipeline.keys import job_script_key
from pipeline.storage import ObjectStore
from topics.admin import admin_client, create_topics
from topics.events import decode_result
from topics.partitioning import partition_for
from topics.specs import RESULTS, TopicSpec, topic_names

log = logging.getLogger(__name__)

APP_ID = "vf-aggregator"
TABLE = "jobs"
# Emitted markers outlive the results topic's retention, after which no duplicate can come.
MARKER_TTL_S = RESULTS.retention_ms / 1000 + 24 * 3600 if RESULTS.retention_ms else 8 * 86400


def app_id(settings: Settings) -> str:
    """Also the consumer group and the prefix of faust's topics, so tenants stay apart."""
    return settings.kafka.topic_prefix + APP_ID


def broker_credentials(kafka: KafkaSettings) -> faust.auth.Credentials | None:
    """faust's form of the same security arguments the aiokafka clients get."""
    kwargs = security_kwargs(kafka)
    if "sasl_mechanism" in kwargs:
        return faust.SASLCredentials(username=kwargs["sasl_plain_username"],
                                     password=kwargs["sasl_plain_password"],
                                     mechanism=kwargs["sasl_mechanism"],
                                     ssl_context=kwargs.get("ssl_context"))
    if "ssl_context" in kwargs:
        return faust.SSLCredentials(kwargs["ssl_context"])
    return None


class JobAggregator:
    """The faust app, its table, agent, timer and pages, around one `JobEmitter`."""

    def __init__(self, settings: Settings, *, store: ObjectStore, datadir: Path | None = None,
                 tick_s: float | None = None, metrics: AggregatorMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else AggregatorMetrics()
        self._store = store
        names = topic_names(settings.kafka.topic_prefix)
        self._results_topic = names.results
        self._jobs_topic = names.jobs
        agg, member = settings.aggregator, settings.worker  # process identity: worker group
        self._timeout_s = float(agg.job_timeout_seconds)
        web = agg.port > 0
        self.app = faust.App(
            app_id(settings),
            broker=[f"kafka://{hp.strip()}" for hp in settings.kafka.bootstrap.split(",")],
            broker_credentials=broker_credentials(settings.kafka),
            store="memory://",
            datadir=str(datadir or agg.datadir_path()),
            topic_partitions=RESULTS.partitions,
            topic_replication_factor=agg.replication_factor,
            topic_disable_leader=True,
            consumer_auto_offset_reset="earliest",
            processing_guarantee="at_least_once",
            broker_commit_every=100,
            broker_commit_interval=1.0,
            # Static membership: a restarted aggregator (same VF_INSTANCE_ID) takes its
            # partitions straight back instead of waiting out the dead member's session;
            # VF_INSTANCE_ID set empty makes it a dynamic member, as it does a worker.
            consumer_group_instance_id=(f"{member.instance_id}-aggregator"
                                        if member.instance_id else None),
            broker_session_timeout=member.session_timeout_ms / 1000,
            web_enabled=web,
            web_bind=member.metrics_host,
            web_port=agg.port if web else 6066,  # unused when disabled
            web_host=member.metrics_host,
        )
        self.results = self.app.topic(self._results_topic, key_type=bytes, value_type=bytes,
                                      key_serializer="raw", value_serializer="raw")
        # bytes in, bytes out: faust's raw codec; the values are msgspec JSON (JobState).
        self.table = self.app.Table(TABLE, default=None, key_type=bytes, value_type=bytes,
                                    partitions=RESULTS.partitions, use_partitioner=True,
                                    help="open jobs and emitted markers, by job ID")
        self.usage = UsageMeter(self.app, store=store, partitions=RESULTS.partitions,
                                results_topic=self._results_topic,
                                source=app_id(settings), publish_s=agg.usage_publish_s,
                                horizon_s=MARKER_TTL_S,
                                on_outcome=self.metrics.on_usage)
        self._lock = asyncio.Lock()
        self._emitter: JobEmitter | None = None
        # What this object started itself (faust starts and stops the app): the emitter's
        # clients, stopped in reverse at shutdown (consumers/startup.py).
        self._parts = contextlib.AsyncExitStack()
        self._owned_since = time.time()
        self.emitted = 0  # events produced by this process (tests and logs)
        self.app.agent(self.results, name="aggregate")(self._aggregate)
        interval = tick_s if tick_s is not None else min(5.0, max(0.2, self._timeout_s / 4))
        self.app.timer(interval, name="close_jobs")(self._tick)
        self.app.on_partitions_assigned.connect(self._on_assigned)
        self.app.on_before_shutdown.connect(self._on_shutdown)
        if web:
            self._add_pages()

    # --- the stream -----------------------------------------------------------------------

    async def _aggregate(self, stream: Any) -> None:
        await self._changelog_known()
        async for event in stream.events():
            message = event.message
            ctx = {"topic": message.topic, "partition": message.partition,
                   "offset": message.offset}
            try:
                result = decode_result(event.value or b"")
            except ValueError as exc:  # msgspec errors are ValueErrors (topics.events.decode_json)
                log.warning("not a tts.result.v1, skipped: %s", exc, extra=ctx)
                self.metrics.on_result("undecodable")
                continue
            self.usage.count(result, message.partition)
            if result.job is None:
                self.metrics.on_result("no_job")
                continue
            async with self._lock:
                key = table_key(result)
                state = self._get(key)
                if needs_opening(state, result):
                    state = await self._open_version(result.job.id, result_version(result),
                                                     state, result.tenant)
                merged, outcome = merge_result(state, result, time.time())
                self.metrics.on_result(outcome)
                if merged is None:
                    continue
                self.table[key] = encode_state(merged)
                if merged.complete:
                    await self._close(key, merged)

    async def _changelog_known(self) -> None:
        """faust hashes a table key to its changelog partition from the producer's metadata
        without waiting for it. Right after a restart, before that metadata named the
        changelog topic, a table write raised TypeError ("'NoneType' object is not
        iterable") and the agent crashed for good, its jobs never closed (a CI run under
        load). aiokafka's partitions_for waits for the topic's metadata; the usage ledger's
        changelog is waited for too, as it is written first."""
        driver: Any = self.app.producer  # faust's aiokafka driver: no public way to it
        producer = driver._ensure_producer()
        for table in (self.usage.table, self.table):
            topic = table.changelog_topic.get_topic_name()
            try:
                await asyncio.wait_for(producer.partitions_for(topic), 60)
            except Exception as exc:  # the write then fails as before, and says why
                log.warning("no metadata for the changelog topic %s yet: %s", topic, exc)

    async def _tick(self) -> None:
        """Close jobs that are complete but not emitted (after a crash) or that timed out."""
        if self.app.rebalancing or self.app.in_recovery:
            return
        owned = {tp.partition for tp in self.app.consumer.assignment()
                 if tp.topic == self._results_topic}
        now = time.time()
        open_jobs = markers = 0
        async with self._lock:
            for key in list(self.table.keys()):
                # Results are keyed by the bare job ID: its partition is the owner's.
                if partition_for(job_id_of(key), RESULTS.partitions) not in owned:
                    continue  # another instance's job (the memory store keeps revoked keys)
                state = self._get(key)
                if state is None:
                    continue
                if state.emitted:
                    if now - (state.emitted_at or now) > MARKER_TTL_S:
                        del self.table[key]
                    else:
                        markers += 1
                    continue
                if ready(state, now, self._timeout_s, not_before=self._owned_since):
                    if not state.complete:
                        log.info("job %s: no result for %.0f s, closing with %d/%d lines",
                                 state.job_id, self._timeout_s, len(state.clips), state.total)
                    if await self._close(key, state):
                        markers += 1
                        continue
                open_jobs += 1
        self.metrics.set_table(open_jobs=open_jobs, markers=markers)

    async def _close(self, key: bytes, state: JobState) -> bool:
        """Emit the job; on failure keep it open so the next tick retries. True: closed."""
        try:
            emitter = await self._ensure_emitter()
            event, produced = await emitter.emit(state)
        except Exception:
            log.exception("job %s: could not emit yet; will retry", state.job_id)
            self.metrics.on_emit_error()
            return False
        done = time.time()
        self.table[key] = encode_state(emitted_marker(state, event.status, done))
        self.emitted += int(produced)
        if not produced:
            self.metrics.on_job_already_emitted()
        else:
            # A timed-out job's "latency" would only restate the timeout, so it is left out.
            self.metrics.on_job_emitted(
                event.status, timed_out=not state.complete,
                latency_s=done - state.last_seen if state.complete else None)
        return True

    async def _open_version(self, job_id: str, version: int, state: JobState | None,
                            tenant: str | None) -> JobState | None:
        """Revision `version` seeded with the clips its manifest carries over; the store is
        read once per version. Without a readable manifest the merge opens it empty."""
        try:
            raw = await asyncio.to_thread(self._store.get,
                                          job_script_key(job_id, version, tenant=tenant))
            manifest = decode_manifest(raw) if raw is not None else None
        except ValueError as exc:  # msgspec's errors, and an ID unfit for a key
            log.warning("job %s: version %d's manifest is unreadable (%s)", job_id, version,
                        exc)
            manifest = None
        opened = open_version(job_id, version, manifest, time.time(), tenant)
        if opened is not None:
            log.info("job %s: version %d opened, %d of %d lines carried from version %s",
                     job_id, version, len(opened.clips), opened.total, manifest and
                     manifest.base_version)
        return opened if opened is not None else state

    def _get(self, key: bytes) -> JobState | None:
        raw = self.table.get(key)
        return decode_state(raw) if raw else None

    async def _ensure_emitter(self) -> JobEmitter:
        """The emitter, started on first use. Its stop goes on an exit stack before it
        starts: one whose start fails halfway (tts.jobs missing, a broker refusing) is
        stopped at once, not one producer leaked per retrying tick; a started one joins
        `_parts`, which `_on_shutdown` unwinds."""
        if self._emitter is None:
            emitter = JobEmitter(settings=self.settings, store=self._store,
                                 producer=make_producer(self.settings.kafka),
                                 jobs_topic=self._jobs_topic)
            async with contextlib.AsyncExitStack() as stack:
                await startup.start_part(stack, "job emitter", emitter.start, emitter.stop,
                                         logger=log)
                self._parts.push_async_callback(stack.pop_all().aclose)
            self._emitter = emitter
        return self._emitter

    # --- lifecycle ------------------------------------------------------------------------

    async def _on_assigned(self, app: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        # Results for newly owned jobs may still be unread: count silence from now.
        self._owned_since = time.time()
        self.usage.on_assigned()
        assigned: set[TP] = args[0] if args else set()
        mine = sorted(tp.partition for tp in assigned if tp.topic == self._results_topic)
        self.metrics.set_partitions(len(mine))
        log.info("aggregating %s partitions %s", self._results_topic, mine)

    async def _on_shutdown(self, app: Any, /, *_: Any, signal: Any, **__: Any) -> None:
        log.info("stopping: %d job events produced by this process", self.emitted)
        async with self._lock:  # no emit runs meanwhile
            parts, self._parts = self._parts, contextlib.AsyncExitStack()
            self._emitter = None
            await parts.aclose()

    def _add_pages(self) -> None:
        aggregator = self

        @self.app.page("/healthz")
        async def healthz(view: View, request: Request) -> Response:
            return view.json({"status": "ok"})

        @self.app.page("/readyz")
        async def readyz(view: View, request: Request) -> Response:
            app = aggregator.app
            busy = app.rebalancing or app.in_recovery
            body = {"ready": not busy, "rebalancing": bool(app.rebalancing),
                    "in_recovery": bool(app.in_recovery), "emitted": aggregator.emitted}
            return view.json(body, status=503 if busy else 200)

        @self.app.page("/metrics")
        async def metrics(view: View, request: Request) -> Response:
            payload, content_type = aggregator.metrics.render()
            # In the headers, not content_type=: aiohttp refuses a charset in that argument.
            return view.bytes(payload, headers={"Content-Type": content_type})

        del healthz, readyz, metrics


async def declare_changelogs(aggregator: JobAggregator) -> list[str]:
    """Create the tables' changelog topics (compacted, one partition per tts.results
    partition) before faust starts, if they are missing; returns those created.

    Left to faust, a first start creates them while its first rebalance runs: the assignor
    then ignores the missing topic ("Ignoring missing topic ...-changelog"). A CI run in
    which that happened lost ledger entries across a kill -9 (2 recovered, usage stuck at
    114.8 of 196.8 audio seconds, the results' offsets already committed); the missing
    changelog assignment is the likely cause, not a proven one. Declared first, the
    changelog partitions are there at the first assignment."""
    settings = aggregator.settings
    specs = tuple(TopicSpec(table.changelog_topic.get_topic_name(), RESULTS.partitions,
                            "compact", None, "table key")
                  for table in (aggregator.table, aggregator.usage.table))
    admin = admin_client(settings.kafka.bootstrap, **security_kwargs(settings.kafka))
    await admin.start()
    try:
        return await create_topics(admin, specs=specs,
                                   replication_factor=settings.aggregator.replication_factor)
    finally:
        await admin.close()


def run(aggregator: JobAggregator, *, loglevel: str = "info") -> int:
    """Run until SIGTERM/SIGINT: faust's worker stops the agent, commits and leaves."""
    if loglevel != "debug":
        # faust narrates every service start and stop at INFO; ours say what matters.
        for name in ("faust", "mode"):
            logging.getLogger(name).setLevel(logging.WARNING)
    worker = faust.Worker(aggregator.app, loglevel=loglevel, quiet=True,
                          redirect_stdouts=False, override_logging=False)
    worker.spinner = None  # its terminal escapes would break one-JSON-object-a-line logs
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
