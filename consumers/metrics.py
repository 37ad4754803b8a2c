"""Worker metrics: sensor-style hooks in front of Prometheus collectors.

Data flow: the worker loop, the rebalance listener and the profile resolver call hooks
(`on_request_in`, `on_batch_done`, `on_commit`, `set_lag`, ...) as events happen, the way
faust calls its sensors; each hook updates collectors on this object's own
`CollectorRegistry`; `HealthServer` serves `render()` at `/metrics`, which serializes that
registry with `prometheus_client.generate_latest`. Nothing here touches the global default
registry, so tests and several workers in one process each get independent metrics.

Metric names and labels (the dashboard and alert contract):

    vf_requests_in_total                       requests taken off the topic
    vf_requests_total{status,code}             results by status; code "" on success
    vf_stage_seconds{stage}                    queued|profile|synthesis|encode|upload|total
    vf_rtf                                     real-time factor (engine time / audio time)
    vf_inflight, vf_queue_depth, vf_paused_partitions
    vf_batch_size, vf_batch_seconds            per engine batch
    vf_profile_cache_total{result}             hit|store|miss
    vf_consumer_lag{topic,partition}           per assigned partition: end offset minus the
                                               group's committed offset (else the log start),
                                               whoever committed it; cleared on revoke
    vf_partition_commit_stalled_seconds{topic,partition}
                                               how long that committed offset has not moved
                                               while lag > 0 (0 when caught up)
    vf_partitions_stuck                        this worker's partitions stalled longer than
                                               VF_STUCK_PARTITION_SECONDS (consumers/worker/lag.py)
    vf_retries_total{code}, vf_dlq_total{reason_code}, vf_oom_retries_total
    vf_commits_total, vf_rebalances_total{kind}
    vf_lane_queue_depth{lane}                  interactive|batch: requests waiting per lane
    vf_lane_wait_seconds{lane}                 queued (put in the local queue) -> dispatched
    vf_lane_requests_total{lane,status}        answers by lane; status="expired" counts the
                                               requests whose deadline passed
    vf_control_commands_total{result}          tts.control records: applied|invalid|expired
    vf_first_chunk_seconds{lane,since}         streamed requests: record consumed -> first
                                               chunk sent (since="consumed"), engine call ->
                                               first chunk (since="engine")
    vf_audio_chunks_total{lane}                chunk records sent to tts.audio
"""

from __future__ import annotations

import contextlib
import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from topics.errors import ErrorCode

__all__ = ["CONTENT_TYPE", "CONTROL_RESULTS", "FIRST_CHUNK_SINCE", "LANES", "PROFILE_RESULTS",
           "REBALANCE_KINDS", "STAGES", "STATUSES", "WorkerMetrics"]

log = logging.getLogger(__name__)

# generate_latest writes the classic text format with plain names; prometheus_client's own
# un-negotiated handler labels it 0.0.4, which every Prometheus version reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

ERROR_CODES = frozenset(c.value for c in ErrorCode)
STATUSES = ("succeeded", "failed", "rejected", "expired", "cancelled")
CONTROL_RESULTS = ("applied", "invalid", "expired")
STAGES = ("queued", "profile", "synthesis", "encode", "upload", "total")
PROFILE_RESULTS = ("hit", "store", "miss")
REBALANCE_KINDS = ("assigned", "revoked")
LANES = ("batch", "interactive")
FIRST_CHUNK_SINCE = ("consumed", "engine")
# 10 ms .. 10 s: a first chunk is a fraction of a second when things go well.
FIRST_CHUNK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
                       1.0, 1.5, 2.5, 5.0, 10.0)

# 1 ms .. 60 s, roughly x2-x2.5 apart: a cache hit and a long synthesis both land in a bucket.
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
# RTF < 1 is faster than real time; GPU engines sit around 0.05-0.5, CPU fallbacks above 1.
RTF_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0, 10.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32)


class WorkerMetrics:
    """Prometheus collectors of one worker, updated only through the hook methods."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests_in = Counter("vf_requests_in", "Requests consumed from the request topic",
                                    registry=r)
        self._requests = Counter("vf_requests", "Results produced, by status and error code",
                                 ["status", "code"], registry=r)
        self._stage = Histogram("vf_stage_seconds", "Time spent per pipeline stage", ["stage"],
                                buckets=STAGE_BUCKETS, registry=r)
        self._rtf = Histogram("vf_rtf", "Real-time factor of synthesized audio",
                              buckets=RTF_BUCKETS, registry=r)
        self._inflight = Gauge("vf_inflight", "Batches running on the device", registry=r)
        self._queue_depth = Gauge("vf_queue_depth", "Requests waiting in the local queue",
                                  registry=r)
        self._paused = Gauge("vf_paused_partitions", "Partitions paused for backpressure",
                             registry=r)
        self._batch_size = Histogram("vf_batch_size", "Requests per engine batch",
                                     buckets=BATCH_SIZE_BUCKETS, registry=r)
        self._batch_seconds = Histogram("vf_batch_seconds", "Wall time per engine batch",
                                        buckets=STAGE_BUCKETS, registry=r)
        self._profile = Counter("vf_profile_cache", "Voice profile lookups by result",
                                ["result"], registry=r)
        self._lag = Gauge("vf_consumer_lag", "Messages between the group's committed offset "
                          "and the end, per assigned partition", ["topic", "partition"],
                          registry=r)
        self._stall = Gauge("vf_partition_commit_stalled_seconds", "Seconds the committed "
                            "offset has not moved while records wait, per assigned partition",
                            ["topic", "partition"], registry=r)
        self._stuck = Gauge("vf_partitions_stuck", "Assigned partitions whose committed offset "
                            "stood still past VF_STUCK_PARTITION_SECONDS with records waiting",
                            registry=r)
        self._retries = Counter("vf_retries", "Transient failures retried, by error code",
                                ["code"], registry=r)
        self._dlq = Counter("vf_dlq", "Records written to the dead-letter topic", ["reason_code"],
                            registry=r)
        self._spilled = Counter("vf_spilled", "Plain-keyed requests forwarded to another "
                                "worker's shard partition, by lane", ["lane"], registry=r)
        self._oom_retries = Counter("vf_oom_retries", "Batches retried smaller after device OOM",
                                    registry=r)
        self._commits = Counter("vf_commits", "Offset commits made", registry=r)
        self._rebalances = Counter("vf_rebalances", "Partitions assigned or revoked", ["kind"],
                                   registry=r)
        self._lane_depth = Gauge("vf_lane_queue_depth", "Requests waiting in the local queue, "
                                 "per lane", ["lane"], registry=r)
        self._lane_wait = Histogram("vf_lane_wait_seconds", "Time from the local queue to a "
                                    "dispatcher, per lane", ["lane"], buckets=STAGE_BUCKETS,
                                    registry=r)
        self._lane_answers = Counter("vf_lane_requests", "Answers by lane and status",
                                     ["lane", "status"], registry=r)
        self._control = Counter("vf_control_commands", "tts.control records read, by result",
                                ["result"], registry=r)
        for lane in LANES:
            self._lane_depth.labels(lane=lane)
            self._lane_wait.labels(lane=lane)
            for status in STATUSES:
                self._lane_answers.labels(lane=lane, status=status)
        for result in CONTROL_RESULTS:
            self._control.labels(result=result)
        self._first_chunk = Histogram("vf_first_chunk_seconds",
                                      "Time to the first audio chunk of a streamed request",
                                      ["lane", "since"], buckets=FIRST_CHUNK_BUCKETS, registry=r)
        self._chunks = Counter("vf_audio_chunks", "Audio chunk records sent to tts.audio",
                               ["lane"], registry=r)
        for lane in LANES:
            self._chunks.labels(lane=lane)
            for since in FIRST_CHUNK_SINCE:
                self._first_chunk.labels(lane=lane, since=since)
        # Pre-create the closed label sets so dashboards see zeros rather than gaps.
        for stage in STAGES:
            self._stage.labels(stage=stage)
        for result in PROFILE_RESULTS:
            self._profile.labels(result=result)
        for kind in REBALANCE_KINDS:
            self._rebalances.labels(kind=kind)
        self._requests.labels(status="succeeded", code="")
        # The same counts as plain numbers for the fleet status (consumers/worker/fleet.py).
        self.profile_counts: dict[str, int] = dict.fromkeys(PROFILE_RESULTS, 0)
        self.error_counts: dict[str, int] = {}  # ErrorCode value -> failed results

    # -- requests and results ------------------------------------------------------------
    def on_request_in(self) -> None:
        self._requests_in.inc()

    def on_result(self, status: str, code: str | None) -> None:
        self._requests.labels(status=status, code=str(code) if code else "").inc()
        if status != "succeeded" and code and str(code) in ERROR_CODES:  # a closed set
            self.error_counts[str(code)] = self.error_counts.get(str(code), 0) + 1

    def observe_stages(self, timings_ms: dict[str, float]) -> None:
        """Record per-stage timings given in milliseconds (as in the result event) as seconds.

        Unknown stage names are skipped to keep the label set closed.
        """
        for stage, ms in timings_ms.items():
            if stage not in STAGES:
                log.debug("unknown stage %r not recorded", stage)
                continue
            if ms < 0:
                continue  # a clock step backwards; no meaningful duration
            self._stage.labels(stage=stage).observe(ms / 1000.0)

    def observe_rtf(self, rtf: float) -> None:
        self._rtf.observe(rtf)

    # -- capacity and backpressure ---------------------------------------------------------
    def set_inflight(self, n: int) -> None:
        self._inflight.set(n)

    def set_queue_depth(self, n: int) -> None:
        self._queue_depth.set(n)

    def set_paused(self, n: int) -> None:
        self._paused.set(n)

    def on_batch_done(self, size: int, seconds: float) -> None:
        self._batch_size.observe(size)
        self._batch_seconds.observe(seconds)

    def on_oom_retry(self) -> None:
        self._oom_retries.inc()

    # -- lanes and cancellation ----------------------------------------------------------
    def set_lane_depth(self, lane: str, n: int) -> None:
        self._lane_depth.labels(lane=lane).set(n)

    def observe_lane_wait(self, lane: str, seconds: float) -> None:
        self._lane_wait.labels(lane=lane).observe(max(0.0, seconds))

    def on_lane_result(self, lane: str, status: str) -> None:
        self._lane_answers.labels(lane=lane, status=status).inc()

    def on_control(self, result: str) -> None:
        """A tts.control record was applied, skipped as invalid, or too old to matter."""
        self._control.labels(result=result).inc()

    # -- profiles --------------------------------------------------------------------------
    def on_profile(self, result: str) -> None:
        """`result` is hit (in-process LRU), store (loaded from the object store) or miss."""
        self._profile.labels(result=result).inc()
        if result in self.profile_counts:
            self.profile_counts[result] += 1

    # -- consumer group ----------------------------------------------------------------------
    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        self._lag.labels(topic=topic, partition=str(partition)).set(lag)

    def set_commit_stall(self, topic: str, partition: int, seconds: float) -> None:
        self._stall.labels(topic=topic, partition=str(partition)).set(max(0.0, seconds))

    def set_partitions_stuck(self, n: int) -> None:
        self._stuck.set(n)

    def clear_lag(self, topic: str, partition: int) -> None:
        """Drop a revoked partition's lag and stall series so the new owner's aren't
        double-counted."""
        for gauge in (self._lag, self._stall):
            # prometheus_client < 0.21 raises KeyError for a series never set; newer ignore it.
            with contextlib.suppress(KeyError):
                gauge.remove(topic, str(partition))

    def on_retry(self, code: str) -> None:
        self._retries.labels(code=str(code)).inc()

    def on_dlq(self, code: str) -> None:
        self._dlq.labels(reason_code=str(code)).inc()

    def on_spill(self, lane: str) -> None:
        self._spilled.labels(lane=lane).inc()

    def on_commit(self) -> None:
        """One commit call counts once, however many partitions it covers."""
        self._commits.inc()

    def on_rebalance(self, kind: str, n: int) -> None:
        """`n` partitions were assigned or revoked in one rebalance."""
        self._rebalances.labels(kind=kind).inc(max(0, n))

    # -- streamed requests -------------------------------------------------------------------
    def on_first_chunk(self, lane: str, since: str, seconds: float) -> None:
        """`since` is "consumed" (the record taken off the topic) or "engine" (engine call)."""
        self._first_chunk.labels(lane=lane, since=since).observe(max(0.0, seconds))

    def on_chunks(self, lane: str, n: int = 1) -> None:
        self._chunks.labels(lane=lane).inc(n)

    # -- exposition ------------------------------------------------------------------------
    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of this registry and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE
