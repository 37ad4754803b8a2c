from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.metrics import STAGES, WorkerMetrics


def samples(m: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample in the rendered exposition, keyed by name and sorted labels."""
    payload, _ = m.render()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(payload.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: WorkerMetrics, name: str, **labels: str) -> float | None:
    return samples(m).get((name, tuple(sorted(labels.items()))))


def test_registries_are_independent() -> None:
    a, b = WorkerMetrics(), WorkerMetrics()
    a.on_request_in()
    a.on_request_in()
    assert value(a, "vf_requests_in_total") == 2
    assert value(b, "vf_requests_in_total") == 0


def test_render_returns_prometheus_text_and_content_type() -> None:
    m = WorkerMetrics()
    payload, content_type = m.render()
    assert content_type.startswith("text/plain")
    text = payload.decode()
    assert "# TYPE vf_requests_total counter" in text
    assert "# TYPE vf_stage_seconds histogram" in text
    assert "# TYPE vf_consumer_lag gauge" in text


def test_results_by_status_and_code_with_empty_code_on_success() -> None:
    m = WorkerMetrics()
    m.on_result("succeeded", None)
    m.on_result("succeeded", None)
    m.on_result("failed", "engine_oom")
    m.on_result("rejected", "voice_not_found")
    m.on_result("expired", "deadline_exceeded")
    assert value(m, "vf_requests_total", status="succeeded", code="") == 2
    assert value(m, "vf_requests_total", status="failed", code="engine_oom") == 1
    assert value(m, "vf_requests_total", status="rejected", code="voice_not_found") == 1
    assert value(m, "vf_requests_total", status="expired", code="deadline_exceeded") == 1
    assert 'vf_requests_total{code="",status="succeeded"} 2.0' in m.render()[0].decode()


def test_stage_timings_are_taken_in_ms_and_recorded_in_seconds() -> None:
    m = WorkerMetrics()
    m.observe_stages({"queued": 3.0, "synthesis": 1500.0, "total": 1800.0})
    assert value(m, "vf_stage_seconds_sum", stage="synthesis") == pytest.approx(1.5)
    assert value(m, "vf_stage_seconds_count", stage="synthesis") == 1
    # 3 ms falls above the 2.5 ms bucket and within 5 ms.
    assert value(m, "vf_stage_seconds_bucket", stage="queued", le="0.0025") == 0
    assert value(m, "vf_stage_seconds_bucket", stage="queued", le="0.005") == 1
    assert value(m, "vf_stage_seconds_bucket", stage="total", le="1.0") == 0
    assert value(m, "vf_stage_seconds_bucket", stage="total", le="2.5") == 1


def test_stage_histogram_spans_1ms_to_60s_and_keeps_labels_closed() -> None:
    m = WorkerMetrics()
    m.observe_stages({"bogus": 10.0, "upload": -5.0})
    s = samples(m)
    stage_labels = {dict(labels)["stage"] for (name, labels) in s
                    if name == "vf_stage_seconds_count"}
    assert stage_labels == set(STAGES)
    assert value(m, "vf_stage_seconds_count", stage="upload") == 0
    les = {dict(labels)["le"] for (name, labels) in s
           if name == "vf_stage_seconds_bucket" and dict(labels)["stage"] == "total"}
    assert {"0.001", "60.0", "+Inf"} <= les


def test_rtf_and_batches() -> None:
    m = WorkerMetrics()
    m.observe_rtf(0.2)
    m.on_batch_done(3, 0.75)
    m.on_batch_done(8, 2.0)
    assert value(m, "vf_rtf_count") == 1
    assert value(m, "vf_rtf_sum") == pytest.approx(0.2)
    assert value(m, "vf_batch_size_bucket", le="2.0") == 0
    assert value(m, "vf_batch_size_bucket", le="4.0") == 1
    assert value(m, "vf_batch_size_bucket", le="8.0") == 2
    assert value(m, "vf_batch_size_sum") == 11
    assert value(m, "vf_batch_seconds_count") == 2
    assert value(m, "vf_batch_seconds_sum") == pytest.approx(2.75)


def test_gauges_follow_the_latest_value() -> None:
    m = WorkerMetrics()
    m.set_inflight(2)
    m.set_queue_depth(7)
    m.set_paused(3)
    m.set_queue_depth(1)
    assert value(m, "vf_inflight") == 2
    assert value(m, "vf_queue_depth") == 1
    assert value(m, "vf_paused_partitions") == 3


def test_profile_cache_results_start_at_zero() -> None:
    m = WorkerMetrics()
    for result in ("hit", "store", "miss"):
        assert value(m, "vf_profile_cache_total", result=result) == 0
    m.on_profile("hit")
    m.on_profile("hit")
    m.on_profile("miss")
    assert value(m, "vf_profile_cache_total", result="hit") == 2
    assert value(m, "vf_profile_cache_total", result="store") == 0
    assert value(m, "vf_profile_cache_total", result="miss") == 1


def test_lag_per_partition_and_cleared_on_revoke() -> None:
    m = WorkerMetrics()
    m.set_lag("vf.tts.requests", 0, 12)
    m.set_lag("vf.tts.requests", 1, 4)
    m.set_lag("vf.tts.requests", 0, 5)
    assert value(m, "vf_consumer_lag", topic="vf.tts.requests", partition="0") == 5
    m.clear_lag("vf.tts.requests", 0)
    m.clear_lag("vf.tts.requests", 9)  # never reported: must not raise
    assert value(m, "vf_consumer_lag", topic="vf.tts.requests", partition="0") is None
    assert value(m, "vf_consumer_lag", topic="vf.tts.requests", partition="1") == 4
    assert 'partition="0"' not in m.render()[0].decode()


def test_retries_dlq_oom_commits_and_rebalances() -> None:
    m = WorkerMetrics()
    m.on_retry("storage_unavailable")
    m.on_retry("storage_unavailable")
    m.on_dlq("invalid_json")
    m.on_oom_retry()
    m.on_commit()
    m.on_commit()
    m.on_rebalance("assigned", 4)
    m.on_rebalance("revoked", 2)
    m.on_rebalance("assigned", 0)
    assert value(m, "vf_retries_total", code="storage_unavailable") == 2
    assert value(m, "vf_dlq_total", reason_code="invalid_json") == 1
    assert value(m, "vf_oom_retries_total") == 1
    assert value(m, "vf_commits_total") == 2
    assert value(m, "vf_rebalances_total", kind="assigned") == 4
    assert value(m, "vf_rebalances_total", kind="revoked") == 2


def test_lanes_have_their_own_depth_wait_and_answers_from_zero() -> None:
    m = WorkerMetrics()
    for lane in ("interactive", "batch"):
        assert value(m, "vf_lane_queue_depth", lane=lane) == 0
        assert value(m, "vf_lane_requests_total", lane=lane, status="cancelled") == 0
        assert value(m, "vf_lane_wait_seconds_count", lane=lane) == 0
    m.set_lane_depth("interactive", 3)
    m.observe_lane_wait("interactive", 0.02)
    m.observe_lane_wait("batch", -1.0)  # a clock step: recorded as 0, not dropped
    m.on_lane_result("interactive", "expired")
    m.on_lane_result("batch", "cancelled")
    m.on_control("applied")
    m.on_control("invalid")
    assert value(m, "vf_lane_queue_depth", lane="interactive") == 3
    assert value(m, "vf_lane_wait_seconds_sum", lane="interactive") == pytest.approx(0.02)
    assert value(m, "vf_lane_wait_seconds_bucket", lane="batch", le="0.001") == 1
    assert value(m, "vf_lane_requests_total", lane="interactive", status="expired") == 1
    assert value(m, "vf_lane_requests_total", lane="batch", status="cancelled") == 1
    assert value(m, "vf_control_commands_total", result="applied") == 1
    assert value(m, "vf_control_commands_total", result="expired") == 0
