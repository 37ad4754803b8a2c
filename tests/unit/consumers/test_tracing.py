from __future__ import annotations

import re

from consumers.tracing import child_traceparent

_FORMAT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def test_incoming_trace_id_is_kept_with_a_new_span() -> None:
    incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    out = child_traceparent([("traceparent", incoming.encode())])
    assert out.split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert out.split("-")[2] != "00f067aa0ba902b7"
    assert out.endswith("-01")


def test_missing_or_invalid_header_starts_a_new_trace() -> None:
    for headers in ([], [("traceparent", b"garbage")],
                    [("traceparent", b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01")]):
        out = child_traceparent(headers)
        assert _FORMAT.match(out)
        assert out.split("-")[1] != "0" * 32


def test_a_traceparent_header_without_a_value_starts_a_new_trace() -> None:
    # Kafka headers may have null values; aiokafka hands them over as None.
    out = child_traceparent([("traceparent", None), ("other", b"x")])
    assert _FORMAT.match(out)
