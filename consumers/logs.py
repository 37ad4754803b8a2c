"""Log set-up: one JSON object a line (for Loki) or plain text for people.

Message context travels in `extra=` (request_id, voice_id, partition, offset, stage) and
becomes top-level JSON keys. A `RepeatFilter` on the handler keeps a burst of one message
template to a few lines a window: with the broker down, aiokafka retries its metadata update
without a pause and logs each failure (aio-libs/aiokafka#496), about 1,500 lines a second.
A `LeaderMoveFilter` before it turns one retried aiokafka ERROR into a WARNING that says
what happened, so an alert on ERROR lines does not fire each time a topic is made.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
from aiokafka.errors import NotLeaderForPartitionError

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


class RepeatFilter(logging.Filter):
    """Lets `burst` records of one (logger, template) through per `window_s`; the first one
    after a window that dropped some says how many were left out."""

    def __init__(self, *, burst: int = 5, window_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._burst, self._window_s, self._clock = burst, window_s, clock
        self._seen: dict[tuple[str, object], list[float]] = {}  # key -> [start, count, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = self._clock()
        state = self._seen.get(key)
        if state is None or now - state[0] >= self._window_s:
            dropped = 0 if state is None else int(state[2])
            if len(self._seen) > 1000:  # templates are few; IDs live in the args, not here
                self._seen.clear()
            self._seen[key] = [now, 1, 0]
            if dropped:
                record.msg = f"{record.msg} (and {dropped} more like it left out)"
            return True
        state[1] += 1
        if state[1] <= self._burst:
            return True
        state[2] += 1
        return False


class LeaderMoveFilter(logging.Filter):
    """aiokafka's fetcher logs a ListOffsets answered "not the leader" at ERROR ("Failed
    fetch offsets from <node>: ...") and retries it after its backoff. Kafka answers that for
    a moment whenever a partition's leadership moves: just after the topic was created, or
    while a broker restarts. That record becomes a WARNING saying so; any other error keeps
    its level."""

    FETCHER = "aiokafka.consumer.fetcher"
    TEMPLATE = "Failed fetch offsets from %s: %s"

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (record.name == self.FETCHER and record.levelno == logging.ERROR
                and record.msg == self.TEMPLATE and isinstance(args, tuple) and len(args) == 2
                and isinstance(args[1], NotLeaderForPartitionError)):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = (f"{self.TEMPLATE} (retried: the partition's leader was moving, as "
                          "it does just after a topic is created or while a broker restarts)")
        return True


def configure(fmt: str = "json", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(LeaderMoveFilter())  # first: the repeat budget is per final template
    handler.addFilter(RepeatFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
