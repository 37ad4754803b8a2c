"""Cancellation on the worker: the registry of cancelled IDs, control records, queued work."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import msgspec
import pytest

from consumers.worker.batching import VoiceBatcher
from consumers.worker.cancellation import CancelRegistry, ControlReader, QueueCanceller
from consumers.worker.inflight import InFlightRequest
from pipeline.answers import Answers
from tests.unit.consumers.worker.fakes import P0, record
from topics.control import cancel
from topics.events import ControlCommand, JobRef, SynthesisRequest, SynthesisResult, encode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_request_cancel_names_only_that_request() -> None:
    reg = CancelRegistry()
    reg.add(cancel(request_id="r-1", reason="caller hung up"))
    assert reg.is_cancelled("r-1")
    assert reg.is_cancelled("r-1", "some-job")
    assert not reg.is_cancelled("r-2")
    assert reg.reason("r-1") == "caller hung up"


def test_a_job_cancel_names_every_line_of_the_job_and_nothing_else() -> None:
    reg = CancelRegistry()
    reg.add(cancel(job_id="video-7"))
    assert reg.is_cancelled("video-7-0000", "video-7")
    assert reg.is_cancelled("video-7-0099", "video-7")
    assert not reg.is_cancelled("video-7-0000", "video-8")
    assert not reg.is_cancelled("video-7")  # a request ID is not a job ID
    assert reg.reason("x", "video-7") == ""


def test_a_cancel_is_forgotten_after_its_ttl() -> None:
    clock = Clock()
    reg = CancelRegistry(ttl_s=60, clock=clock)
    reg.add(cancel(request_id="r-1"))
    clock.now += 59.9
    assert reg.is_cancelled("r-1")
    clock.now += 0.2
    assert not reg.is_cancelled("r-1")
    assert len(reg) == 0


def test_a_replayed_cancel_lives_only_the_rest_of_its_ttl() -> None:
    clock = Clock()
    reg = CancelRegistry(ttl_s=60, clock=clock)
    reg.add(cancel(request_id="r-1"), age_s=50)
    clock.now += 9.9
    assert reg.is_cancelled("r-1")
    clock.now += 0.2
    assert not reg.is_cancelled("r-1")


def test_the_registry_is_bounded_and_drops_the_oldest_first() -> None:
    reg = CancelRegistry(max_entries=3)
    for i in range(5):
        reg.add(cancel(request_id=f"r-{i}"))
    assert len(reg) == 3
    assert [reg.is_cancelled(f"r-{i}") for i in range(5)] == [False, False, True, True, True]
    reg.add(cancel(request_id="r-2"))  # repeated: refreshed, so r-3 is now the oldest
    reg.add(cancel(job_id="j"))
    assert [reg.is_cancelled(f"r-{i}") for i in (2, 3, 4)] == [True, False, True]
    assert reg.is_cancelled("any", "j")


def test_checker_is_a_zero_argument_callable_that_sees_later_cancels() -> None:
    reg = CancelRegistry()
    check = reg.checker("r-1", "job-1")
    assert check() is False
    reg.add(cancel(job_id="job-1"))
    assert check() is True


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        CancelRegistry(ttl_s=0)
    with pytest.raises(ValueError, match="max_entries"):
        CancelRegistry(max_entries=0)


def _reader(reg: CancelRegistry, seen: list[ControlCommand],
            results: list[str]) -> ControlReader:
    return ControlReader(consumer=None, topic="tts.control", registry=reg,
                         on_cancel=seen.append, on_command=results.append)


def test_control_records_are_applied_and_bad_ones_skipped_with_a_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    reg, seen, results = CancelRegistry(), [], []  # type: ignore[var-annotated]
    reader = _reader(reg, seen, results)
    now_ms = int(time.time() * 1000)
    with caplog.at_level(logging.WARNING):
        assert reader.handle(b"not json", timestamp_ms=now_ms) is None
        both = {"schema": "tts.control.v1", "action": "cancel", "request_id": "a", "job_id": "b"}
        assert reader.handle(msgspec.json.encode(both), timestamp_ms=now_ms) is None
        assert reader.handle(None, timestamp_ms=now_ms) is None
    assert caplog.text.count("control record skipped") == 3
    assert "exactly one of request_id and job_id" in caplog.text
    command = reader.handle(encode(cancel(job_id="j-1")), timestamp_ms=now_ms)
    assert command is not None and seen == [command]
    assert reg.is_cancelled("j-1-0003", "j-1")
    assert results == ["invalid", "invalid", "invalid", "applied"]


def test_a_control_record_older_than_the_ttl_is_ignored() -> None:
    reg, seen, results = CancelRegistry(ttl_s=60), [], []  # type: ignore[var-annotated]
    reader = _reader(reg, seen, results)
    old_ms = int((time.time() - 61) * 1000)
    assert reader.handle(encode(cancel(request_id="r-1")), timestamp_ms=old_ms) is None
    assert not reg.is_cancelled("r-1") and seen == [] and results == ["expired"]


# -- queued requests ---------------------------------------------------------------------------

def _req(offset: int, job: str | None = None) -> InFlightRequest:
    ref = JobRef(id=job, index=offset, total=100) if job else None
    request = SynthesisRequest(request_id=f"{job or 'r'}-{offset:04d}", voice_id="v1",
                               text="hello", job=ref)
    return InFlightRequest(record(offset), P0, request, datetime.now(UTC))


def _canceller() -> tuple[CancelRegistry, VoiceBatcher[InFlightRequest],
                          list[tuple[InFlightRequest, SynthesisResult]], QueueCanceller]:
    reg = CancelRegistry()
    batcher: VoiceBatcher[InFlightRequest] = VoiceBatcher(max_batch=4, batch_wait_s=0,
                                                          capacity=100)
    answered: list[tuple[InFlightRequest, SynthesisResult]] = []
    canceller = QueueCanceller(registry=reg, batcher=batcher,
                               answers=lambda: Answers(engine="bench", worker="w"),
                               finish=lambda req, res: answered.append((req, res)))
    return reg, batcher, answered, canceller


def test_a_job_cancel_takes_its_queued_lines_out_of_both_lanes_and_answers_each() -> None:
    reg, batcher, answered, canceller = _canceller()
    for i in range(5):
        batcher.put("v1", _req(i, job="film"), "batch" if i % 2 else "interactive")
    batcher.put("v1", _req(9))
    command = cancel(job_id="film", reason="re-cut")
    reg.add(command)
    canceller.on_cancel(command)
    assert sorted(r.request_id for r, _ in answered) == [f"film-{i:04d}" for i in range(5)]
    assert {res.status for _, res in answered} == {"cancelled"}
    assert all(res.error is not None and res.error.code == "cancelled"
               and res.error.message == "cancelled before synthesis: re-cut"
               for _, res in answered)
    assert batcher.qsize() == 1 and canceller.cancelled == 5


def test_a_request_cancel_takes_out_only_that_request() -> None:
    reg, batcher, answered, canceller = _canceller()
    for i in range(3):
        batcher.put("v1", _req(i))
    command = cancel(request_id="r-0001")
    reg.add(command)
    canceller.on_cancel(command)
    assert [r.request_id for r, _ in answered] == ["r-0001"]
    assert batcher.qsize() == 2


def test_a_request_arriving_after_its_cancel_is_answered_without_queueing() -> None:
    reg, _batcher, answered, canceller = _canceller()
    assert canceller.cancel_if_named(_req(1, job="film")) is False
    reg.add(cancel(job_id="film"))
    assert canceller.cancel_if_named(_req(2, job="film")) is True
    assert [(r.request_id, res.status) for r, res in answered] == [("film-0002", "cancelled")]


def test_a_huge_reason_is_cut_before_it_is_echoed_in_cancelled_results() -> None:
    from consumers.worker.cancellation import MAX_REASON_CHARS

    reg, _batcher, answered, canceller = _canceller()
    reg.add(cancel(request_id="film-0001", reason="r" * 1_000_000))
    assert canceller.cancel_if_named(_req(1, job="film")) is True
    ((_, res),) = answered
    assert res.error is not None and len(res.error.message) < MAX_REASON_CHARS + 50


def test_a_cancel_acts_only_within_its_tenant() -> None:
    """IDs are unique within a tenant: rival's cancel of `r-1` is not acme's `r-1`."""
    reg = CancelRegistry()
    reg.add(cancel(request_id="r-1", tenant="rival"))
    reg.add(cancel(job_id="video-7", tenant="rival"))
    assert reg.is_cancelled("r-1", tenant="rival")
    assert not reg.is_cancelled("r-1", tenant="acme")
    assert not reg.is_cancelled("r-1")  # the default tenant's
    assert not reg.checker("x-0001", "video-7", "acme")()
    assert reg.checker("x-0001", "video-7", "rival")()
    reg.add(cancel(request_id="r-1", tenant="default"))  # `default` is the field's absence
    assert reg.is_cancelled("r-1") and not reg.is_cancelled("r-1", tenant="acme")


def test_a_job_cancel_of_one_tenant_leaves_another_tenants_job_of_that_id_queued() -> None:
    reg, batcher, answered, canceller = _canceller()
    for i in range(3):
        acme = _req(i, job="film")
        acme.request = msgspec.structs.replace(acme.request, tenant="acme")
        batcher.put("v1", acme)
        batcher.put("v1", _req(10 + i, job="film"))  # the default tenant's `film`
    command = cancel(job_id="film", tenant="acme")
    reg.add(command)
    canceller.on_cancel(command)
    assert sorted(r.request_id for r, _ in answered) == [f"film-{i:04d}" for i in range(3)]
    assert {res.tenant for _, res in answered} == {"acme"}
    assert batcher.qsize() == 3
    assert canceller.cancel_if_named(_req(11, job="film")) is False
