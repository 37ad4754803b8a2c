"""W3C trace context: carry a request's `traceparent` onto its result, or start one."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def child_traceparent(headers: Sequence[tuple[str, bytes | None]]) -> str:
    """Same trace ID as the incoming header (new span ID), or a fresh sampled trace. A header
    without a value (Kafka allows null ones) counts as absent."""
    for name, value in headers:
        if name.lower() == "traceparent" and value is not None:
            match = _TRACEPARENT.match(value.decode("latin-1").strip())
            if match and set(match.group(1)) != {"0"}:
                return f"00-{match.group(1)}-{secrets.token_hex(8)}-{match.group(3)}"
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
