"""What the outside sees of a running synthesis worker and does to it: SIGTERM/SIGINT (drain,
then a second signal exits at once) and the /healthz and /readyz answers.

HealthServer (consumers/health.py) calls liveness() and readiness(); the signal handlers set
the stop event that SynthesisWorker.run() waits on. SynthesisWorker (loop.py) mixes this in
and owns every attribute read here.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from aiokafka.errors import KafkaError

from consumers.health import Heartbeat
from consumers.settings import Settings
from consumers.worker.checkpoint import Checkpoint
from pipeline.synthesis import RequestProcessor

log = logging.getLogger(__name__)


class WorkerLifecycle:
    _settings: Settings
    _processor: RequestProcessor
    _stopping: asyncio.Event
    _warming: bool
    _engine_ready: Callable[[], bool]
    _last_fetch_ok: float
    _consumer: Any
    heartbeat: Heartbeat
    checkpoint: Checkpoint | None
    fatal: KafkaError | None

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stopping.is_set():
            log.warning("second %s: exiting at once without draining", sig.name)
            raise SystemExit(1)
        log.info("%s received: draining in-flight work (up to %.0f s), then committing",
                 sig.name, self._settings.worker.drain_seconds)
        self._stopping.set()

    def liveness(self) -> tuple[bool, dict[str, object]]:
        """/healthz: the fetch loop beat within 30 s, or the engine is still loading."""
        alive = self._warming or self.heartbeat.alive(30.0)
        return alive, {"event_loop": True, "engine_loading": self._warming,
                       "fetch_loop_heartbeat_age_s": round(self.heartbeat.age(), 2)}

    async def readiness(self) -> tuple[bool, dict[str, object]]:
        """/readyz: engine loaded (as `engine_ready` reports it), broker and store reachable,
        partitions assigned, not draining, the producer not in a fatal state.

        `stuck_partitions` lists the partitions whose commits are stuck (lag.py) but does not
        make the worker unready: a 503 would not move the stuck record (no Service routes
        work here), and an unready pod holds the PodDisruptionBudget's one disruption and
        stalls a StatefulSet rollout, which may be the fix (docs/operations.md).
        """
        store_ok = await asyncio.to_thread(self._processor.store_reachable)
        broker_ok = max(self._last_fetch_ok,
                        self.checkpoint.last_commit_ok if self.checkpoint else 0.0)
        checks: dict[str, object] = {
            "engine_loaded": bool(self._engine_ready()),
            "broker": time.monotonic() - broker_ok < 30.0,
            "store": store_ok,
            "assignment": bool(self._consumer and self._consumer.assignment()),
            "draining": self._stopping.is_set(),
            "stuck_partitions": ([s.as_dict() for s in self.checkpoint.lag.stuck()]
                                 if self.checkpoint else []),
            "producer_fatal": self.fatal is not None,
        }
        ready = all(checks[k] for k in ("engine_loaded", "broker", "store", "assignment"))
        ready = ready and self.fatal is None
        return ready and not self._stopping.is_set(), checks
