"""A running job's per-line figures (consumers/gateway/progress.py): the latest answer wins."""

from __future__ import annotations

from consumers.gateway.progress import Progress


def test_lines_in_order_with_codes_of_failed_lines_only() -> None:
    p = Progress()
    p.answer(3, "failed", "engine_error")
    p.answer(0, "succeeded", None)
    p.answer(1, "failed", "voice_not_found")
    assert p.lines() == [(0, "succeeded", None), (1, "failed", "voice_not_found"),
                         (3, "failed", "engine_error")]
    assert (p.done, p.succeeded) == (3, 1)


def test_a_later_answer_replaces_status_and_code() -> None:
    p = Progress()
    p.answer(2, "failed", "storage_error")
    p.answer(2, "succeeded", None)  # a retry answered it again
    p.answer(5, "failed", "engine_error")
    p.answer(5, "failed", "deadline_exceeded")
    assert p.lines() == [(2, "succeeded", None), (5, "failed", "deadline_exceeded")]
    assert (p.done, p.succeeded) == (2, 1)


def test_a_succeeded_line_carries_no_code_even_if_one_was_sent() -> None:
    p = Progress()
    p.answer(0, "succeeded", "engine_error")
    assert p.lines() == [(0, "succeeded", None)]


def test_no_answer_no_lines() -> None:
    assert Progress().lines() == []
