from __future__ import annotations

import logging

import orjson

from consumers.logs import JsonFormatter, RepeatFilter, TextFormatter


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("consumers.worker.loop", logging.INFO, __file__, 1, "done in %d ms",
                               (12,), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_lines_carry_the_message_context() -> None:
    line = JsonFormatter().format(_record(request_id="r1", voice_id="v1", partition=3,
                                          offset=42))
    entry = orjson.loads(line)
    assert entry["msg"] == "done in 12 ms"
    assert (entry["request_id"], entry["voice_id"], entry["partition"], entry["offset"]) == (
        "r1", "v1", 3, 42)
    assert "\n" not in line


def test_text_format_appends_context() -> None:
    line = TextFormatter("%(message)s").format(_record(request_id="r1"))
    assert line == "done in 12 ms [request_id=r1]"


def test_a_burst_of_one_template_is_folded_and_counted() -> None:
    now = [0.0]
    repeat = RepeatFilter(burst=3, window_s=10.0, clock=lambda: now[0])
    records = [_record() for _ in range(50)]
    passed = [repeat.filter(r) for r in records]
    assert passed == [True] * 3 + [False] * 47
    other = logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, "Unable connect", (), None)
    assert repeat.filter(other)  # another template has its own budget
    now[0] = 10.0
    first = _record()
    assert repeat.filter(first)
    assert first.getMessage() == "done in 12 ms (and 47 more like it left out)"
    quiet = _record()
    now[0] = 25.0
    assert repeat.filter(quiet) and quiet.getMessage() == "done in 12 ms"


def _fetcher_error(error: Exception) -> logging.LogRecord:
    return logging.LogRecord("aiokafka.consumer.fetcher", logging.ERROR, __file__, 1,
                             "Failed fetch offsets from %s: %s", (1, error), None)


def test_a_list_offsets_that_met_a_moving_leader_is_a_warning_that_says_so() -> None:
    from aiokafka.errors import KafkaConnectionError, NotLeaderForPartitionError

    from consumers.logs import LeaderMoveFilter

    moving = _fetcher_error(NotLeaderForPartitionError("tts.requests-3"))
    assert LeaderMoveFilter().filter(moving)
    assert (moving.levelno, moving.levelname) == (logging.WARNING, "WARNING")
    entry = orjson.loads(JsonFormatter().format(moving))
    assert entry["level"] == "warning" and "leader was moving" in entry["msg"]
    assert "NotLeaderForPartitionError" in entry["msg"]
    # another error from the same line, or the same error elsewhere, keeps its level
    down = _fetcher_error(KafkaConnectionError("connection refused"))
    assert LeaderMoveFilter().filter(down) and down.levelno == logging.ERROR
    elsewhere = logging.LogRecord("aiokafka.consumer.group_coordinator", logging.ERROR,
                                  __file__, 1, "Failed fetch offsets from %s: %s",
                                  (1, NotLeaderForPartitionError("x")), None)
    assert LeaderMoveFilter().filter(elsewhere) and elsewhere.levelno == logging.ERROR


def test_configure_puts_the_leader_filter_before_the_repeat_budget() -> None:
    from consumers.logs import LeaderMoveFilter, configure

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure()
        kinds = [type(f) for f in root.handlers[0].filters]
        assert kinds == [LeaderMoveFilter, RepeatFilter]
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
