"""tts.control commands: one target, checked IDs, bad records refused with a reason."""

from __future__ import annotations

import pytest

from topics.control import InvalidControl, cancel, control_key, decode_control
from topics.events import encode


def test_a_cancel_round_trips_and_is_keyed_by_its_target() -> None:
    command = cancel(job_id="ep-7", reason="script withdrawn")
    assert decode_control(encode(command)) == command
    assert control_key(command) == b"ep-7"
    assert b'"schema":"tts.control.v1"' in encode(command)


@pytest.mark.parametrize(("raw", "reason"), [
    (None, "no value"),
    (b"{not json", "not a tts.control.v1 command"),
    (b'{"schema":"tts.control.v1","action":"pause","request_id":"r1"}', "not a tts.control"),
    (b'{"schema":"tts.control.v1","action":"cancel"}', "exactly one"),
    (b'{"schema":"tts.control.v1","action":"cancel","request_id":"a","job_id":"b"}',
     "exactly one"),
    (b'{"schema":"tts.control.v1","action":"cancel","request_id":"../x"}', "outside"),
    (b'{"schema":"tts.control.v1","action":"cancel","job_id":"a..b"}', "'..'"),
])
def test_unusable_commands_are_refused_with_the_reason(raw: bytes | None, reason: str) -> None:
    with pytest.raises(InvalidControl, match=reason):
        decode_control(raw)


def test_an_unknown_field_nested_a_thousand_deep_is_skipped_not_a_crash() -> None:
    # msgspec skips unknown fields recursively: RecursionError used to escape and stop the
    # worker's control loop (the fuzz suite).
    raw = (b'{"schema": "tts.control.v1", "action": "cancel", "request_id": "r", "x": '
           + b"[" * 1000 + b"]" * 1000 + b"}")
    with pytest.raises(InvalidControl, match="nested too deeply"):
        decode_control(raw)
