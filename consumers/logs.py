"""Log set-up: one JSON object a line (for Loki) or plain text for people.

Message context travels in `extra=` (request_id, voice_id, partition, offset, stage) and
becomes top-level JSON keys.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

_CONTEXT = ("request_id", "voice_id", "topic", "partition", "offset", "stage")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _CONTEXT:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        context = " ".join(f"{n}={getattr(record, n)}" for n in _CONTEXT
                           if getattr(record, n, None) is not None)
        return f"{base} [{context}]" if context else base


def configure(fmt: str = "json", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
