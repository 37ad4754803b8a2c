"""Job aggregator metrics: sensor-style hooks in front of Prometheus collectors.

Data flow: the aggregator's agent calls `on_result` once per record it reads from
`tts.results` (with what the merge did to it), `_close` calls `on_job_emitted`,
`on_job_already_emitted` or `on_emit_error` for each attempt to close a job, the timer's
sweep over the table calls `set_table` and the rebalance signal calls `set_partitions`;
each hook updates collectors on this object's own `CollectorRegistry`, and the faust web
page `/metrics` (on `VF_AGGREGATOR_PORT`) serves `render()`. Nothing here touches the
global default registry, so tests and several aggregators in one process stay apart.

Metric names and labels (the dashboard and alert contract, next to `consumers/metrics.py`):

    vf_job_results_total{outcome}         records read from tts.results, by what the merge did:
                                          merged|replaced|duplicate|late|early|invalid|no_job|undecodable
    vf_jobs_emitted_total{status}         job events this process produced: succeeded|partial|failed
    vf_jobs_already_emitted_total         closes that found the event already on tts.jobs
                                          (outbox note) and did not produce it again
    vf_job_timeouts_total                 of those produced, jobs the timer closed incomplete
    vf_job_emit_errors_total              close attempts that raised; the job stays open, retried
    vf_job_emit_seconds                   last result merged -> event acked, complete jobs only
    vf_jobs_open, vf_job_markers          table entries of owned partitions, per timer sweep
    vf_aggregator_partitions              tts.results partitions assigned to this process
    vf_usage_results_total{outcome}       records read, by what usage metering did
                                          (consumers/aggregator/usage.py): counted|engine_added|
                                          duplicate|not_counted|invalid
"""

from __future__ import annotations

from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from consumers.aggregator.state import MergeOutcome
from consumers.aggregator.usage import UsageOutcome
from consumers.metrics import CONTENT_TYPE
from topics.events import JobStatus

__all__ = ["EMIT_BUCKETS", "JOB_STATUSES", "RESULT_OUTCOMES", "USAGE_OUTCOMES",
           "AggregatorMetrics", "ResultOutcome"]

# What `merge_result` says (aggregator_state), plus records that are not a tts.result.v1.
ResultOutcome = Literal[MergeOutcome, "undecodable"]
RESULT_OUTCOMES: tuple[str, ...] = get_args(ResultOutcome)
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)
USAGE_OUTCOMES: tuple[str, ...] = get_args(UsageOutcome)

# 10 ms .. 10 min: a small job closes in tens of ms, a long concat track or a store outage
# (retried every tick) in seconds to minutes.
EMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                300.0, 600.0)


class AggregatorMetrics:
    """Prometheus collectors of one aggregator, updated only through the hook methods."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._results = Counter("vf_job_results", "Results read by the aggregator, by what the "
                                "merge did with them", ["outcome"], registry=r)
        self._emitted = Counter("vf_jobs_emitted", "Job events produced by this process, by "
                                "status", ["status"], registry=r)
        self._already = Counter("vf_jobs_already_emitted", "Job closes that found the event "
                                "already on the jobs topic and did not produce it again",
                                registry=r)
        self._timeouts = Counter("vf_job_timeouts", "Job events produced for jobs closed "
                                 "incomplete after the job timeout", registry=r)
        self._errors = Counter("vf_job_emit_errors", "Attempts to close a job that raised "
                               "(retried on the next timer tick)", registry=r)
        self._emit_seconds = Histogram("vf_job_emit_seconds", "From a complete job's last "
                                       "result to its event acked by the broker",
                                       buckets=EMIT_BUCKETS, registry=r)
        self._open = Gauge("vf_jobs_open", "Jobs in the table not yet emitted (owned "
                           "partitions, as of the last timer sweep)", registry=r)
        self._markers = Gauge("vf_job_markers", "Emitted markers kept in the table against "
                              "late duplicates (owned partitions, last sweep)", registry=r)
        self._partitions = Gauge("vf_aggregator_partitions", "Results partitions assigned to "
                                 "this aggregator", registry=r)
        self._usage = Counter("vf_usage_results", "Results read by the aggregator, by what "
                              "usage metering did with them", ["outcome"], registry=r)
        # Pre-create the closed label sets so dashboards see zeros rather than gaps.
        for outcome in RESULT_OUTCOMES:
            self._results.labels(outcome=outcome)
        for status in JOB_STATUSES:
            self._emitted.labels(status=status)
        for outcome in USAGE_OUTCOMES:
            self._usage.labels(outcome=outcome)

    # -- the stream --------------------------------------------------------------------------
    def on_result(self, outcome: ResultOutcome) -> None:
        # The label set stays closed: a typo'd outcome is a bug, not a new series.
        if outcome not in RESULT_OUTCOMES:
            raise ValueError(f"result outcome {outcome!r} is not one of "
                             f"{', '.join(RESULT_OUTCOMES)}")
        self._results.labels(outcome=outcome).inc()

    def on_usage(self, outcome: UsageOutcome) -> None:
        if outcome not in USAGE_OUTCOMES:
            raise ValueError(f"usage outcome {outcome!r} is not one of "
                             f"{', '.join(USAGE_OUTCOMES)}")
        self._usage.labels(outcome=outcome).inc()

    # -- closing jobs ------------------------------------------------------------------------
    def on_job_emitted(self, status: JobStatus, *, timed_out: bool,
                       latency_s: float | None) -> None:
        """This process produced the job's event; `latency_s` only for complete jobs (for a
        timed-out one it would just measure the timeout)."""
        if status not in JOB_STATUSES:
            raise ValueError(f"job status {status!r} is not one of {', '.join(JOB_STATUSES)}")
        self._emitted.labels(status=status).inc()
        if timed_out:
            self._timeouts.inc()
        if latency_s is not None and latency_s >= 0:  # < 0: the wall clock stepped back
            self._emit_seconds.observe(latency_s)

    def on_job_already_emitted(self) -> None:
        self._already.inc()

    def on_emit_error(self) -> None:
        self._errors.inc()

    # -- table and assignment ----------------------------------------------------------------
    def set_table(self, *, open_jobs: int, markers: int) -> None:
        self._open.set(open_jobs)
        self._markers.set(markers)

    def set_partitions(self, n: int) -> None:
        self._partitions.set(n)

    # -- exposition --------------------------------------------------------------------------
    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition of this registry and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE
