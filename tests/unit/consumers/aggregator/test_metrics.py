"""The aggregator's metric hooks, read back through the Prometheus text they render."""

from __future__ import annotations

from typing import get_args

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.aggregator.metrics import (
    JOB_STATUSES,
    RESULT_OUTCOMES,
    AggregatorMetrics,
    ResultOutcome,
)
from consumers.aggregator.state import MergeOutcome


def samples(m: AggregatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    payload, _ = m.render()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(payload.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: AggregatorMetrics, name: str, **labels: str) -> float | None:
    return samples(m).get((name, tuple(sorted(labels.items()))))


def test_every_outcome_and_status_is_scraped_as_zero_before_it_happens() -> None:
    m = AggregatorMetrics()
    for outcome in RESULT_OUTCOMES:
        assert value(m, "vf_job_results_total", outcome=outcome) == 0
    for status in JOB_STATUSES:
        assert value(m, "vf_jobs_emitted_total", status=status) == 0
    for name in ("vf_jobs_already_emitted_total", "vf_job_timeouts_total",
                 "vf_job_emit_errors_total", "vf_jobs_open", "vf_job_markers",
                 "vf_aggregator_partitions", "vf_job_emit_seconds_count"):
        assert value(m, name) == 0, name
    payload, content_type = m.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    assert b"# TYPE vf_job_emit_seconds histogram" in payload


def test_the_outcomes_are_the_merge_outcomes_plus_undecodable() -> None:
    assert set(RESULT_OUTCOMES) == {*get_args(MergeOutcome), "undecodable"}
    assert set(JOB_STATUSES) == {"succeeded", "partial", "failed"}


def test_results_are_counted_by_outcome_and_an_unknown_outcome_is_refused() -> None:
    m = AggregatorMetrics()
    seen: list[ResultOutcome] = ["merged", "merged", "duplicate", "late", "undecodable"]
    for outcome in seen:
        m.on_result(outcome)
    assert value(m, "vf_job_results_total", outcome="merged") == 2
    assert value(m, "vf_job_results_total", outcome="duplicate") == 1
    assert value(m, "vf_job_results_total", outcome="late") == 1
    assert value(m, "vf_job_results_total", outcome="replaced") == 0
    with pytest.raises(ValueError, match="result outcome 'dupe' is not one of merged, "):
        m.on_result("dupe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job status 'done' is not one of succeeded"):
        m.on_job_emitted("done", timed_out=False, latency_s=0.1)  # type: ignore[arg-type]
    assert value(m, "vf_jobs_emitted_total", status="succeeded") == 0


def test_an_emitted_job_counts_its_status_and_only_a_complete_one_its_latency() -> None:
    m = AggregatorMetrics()
    m.on_job_emitted("succeeded", timed_out=False, latency_s=0.03)
    m.on_job_emitted("partial", timed_out=True, latency_s=None)
    m.on_job_emitted("failed", timed_out=False, latency_s=-1.0)  # clock stepped back
    assert value(m, "vf_jobs_emitted_total", status="succeeded") == 1
    assert value(m, "vf_jobs_emitted_total", status="partial") == 1
    assert value(m, "vf_jobs_emitted_total", status="failed") == 1
    assert value(m, "vf_job_timeouts_total") == 1
    assert value(m, "vf_job_emit_seconds_count") == 1
    assert value(m, "vf_job_emit_seconds_sum") == pytest.approx(0.03)
    # 30 ms is above the 25 ms bucket and within 50 ms
    assert value(m, "vf_job_emit_seconds_bucket", le="0.025") == 0
    assert value(m, "vf_job_emit_seconds_bucket", le="0.05") == 1


def test_replays_errors_table_and_partitions() -> None:
    m = AggregatorMetrics()
    m.on_job_already_emitted()
    m.on_emit_error()
    m.on_emit_error()
    m.set_table(open_jobs=4, markers=9)
    m.set_partitions(12)
    m.set_table(open_jobs=1, markers=10)  # a gauge: the last sweep wins
    assert value(m, "vf_jobs_already_emitted_total") == 1
    assert value(m, "vf_job_emit_errors_total") == 2
    assert value(m, "vf_jobs_open") == 1 and value(m, "vf_job_markers") == 10
    assert value(m, "vf_aggregator_partitions") == 12


def test_registries_are_independent() -> None:
    a, b = AggregatorMetrics(), AggregatorMetrics()
    a.on_emit_error()
    assert value(a, "vf_job_emit_errors_total") == 1
    assert value(b, "vf_job_emit_errors_total") == 0
