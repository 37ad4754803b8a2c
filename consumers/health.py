"""Health and metrics endpoints: a minimal HTTP/1.1 server on `asyncio.start_server`.

Data flow: Kubernetes probes and the Prometheus scraper connect -> `_serve` reads the
request line and headers (bounded in size and in time) -> `_route` picks the answer:

    GET /healthz  -> liveness()          200 if alive, else 503; JSON {"status", "checks"}
    GET /readyz   -> await readiness()   200 if ready, else 503; JSON {"status", "checks"}
    GET /metrics  -> metrics.render()    200, Prometheus text format
    other path    -> 404                 known path, other method -> 405

-> one response with Content-Length and `Connection: close`, then the connection is closed.
A malformed, oversized or slow request gets a 400/431/408 (or just a closed socket), a route
that raises gets a 500; none of it takes the server down. Checks that raise or hang count as
failed (503) rather than as a 500.

`Heartbeat` is the liveness signal of the worker's fetch loop: the loop calls `beat()` on
each poll, and liveness fails once `age()` passes a threshold (`alive(max_age_s)`), so a
wedged event loop or consumer is restarted by the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus

from consumers.metrics import WorkerMetrics

__all__ = ["ALL_INTERFACES", "HealthServer", "Heartbeat"]

log = logging.getLogger(__name__)

Liveness = Callable[[], tuple[bool, dict[str, object]]]
Readiness = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]

_MAX_HEAD_BYTES = 16 * 1024  # request line + headers; probes and scrapers send a few hundred
_JSON = "application/json"
# Default bind: probes and the scraper reach the pod on its cluster IP, not on loopback.
ALL_INTERFACES = "0.0.0.0"  # noqa: S104


class Heartbeat:
    """Last time a loop showed it is alive, on a monotonic clock."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()  # a worker that just started counts as alive

    def beat(self) -> None:
        self._last = self._clock()

    def age(self) -> float:
        """Seconds since the last beat (or since construction)."""
        return max(0.0, self._clock() - self._last)

    def alive(self, max_age_s: float) -> bool:
        return self.age() <= max_age_s


class _BadRequest(Exception):
    """The request could not be parsed; answered with `status` and the connection closed."""

    def __init__(self, status: HTTPStatus) -> None:
        super().__init__(status.phrase)
        self.status = status


class HealthServer:
    """Serves /healthz, /readyz and /metrics until `stop()`."""

    def __init__(self, *, host: str = ALL_INTERFACES, port: int,
                 metrics: WorkerMetrics, liveness: Liveness, readiness: Readiness,
                 request_timeout_s: float = 5.0, check_timeout_s: float = 5.0) -> None:
        self._host = host
        self._port = port
        self._metrics = metrics
        self._liveness = liveness
        self._readiness = readiness
        self._request_timeout_s = request_timeout_s
        self._check_timeout_s = check_timeout_s
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port once started (a free one when constructed with port 0)."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._serve, self._host, self._port,
                                                  limit=_MAX_HEAD_BYTES)
        log.info("health server listening on %s:%d", self._host, self.port)

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        # Python 3.11's wait_closed does not wait for open connections; end them ourselves.
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()
        log.info("health server stopped")

    # -- one connection ----------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            try:
                method, path = await asyncio.wait_for(self._read_head(reader),
                                                      self._request_timeout_s)
            except _BadRequest as exc:
                await self._respond(writer, exc.status, _JSON, _json({"error": exc.status.phrase}))
                return
            except TimeoutError:
                status = HTTPStatus.REQUEST_TIMEOUT
                await self._respond(writer, status, _JSON, _json({"error": status.phrase}))
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # client went away before finishing its request
            try:
                status, content_type, body = await self._route(method, path)
            except Exception:
                log.exception("health route %s %s failed", method, path)
                status, content_type = HTTPStatus.INTERNAL_SERVER_ERROR, _JSON
                body = _json({"error": status.phrase})
            await self._respond(writer, status, content_type, body)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Whatever one connection does, the server keeps serving the next one.
            log.warning("health request failed", exc_info=True)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._connections.discard(task)

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str]:
        """Request line and headers up to the blank line; returns (method, path)."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE) from None
        except asyncio.IncompleteReadError as exc:
            if not exc.partial.strip():
                raise  # connected and closed without a request: nothing to answer
            # Tolerate a client that ends with a bare LF; anything else stays malformed.
            head = exc.partial
        request_line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[1].startswith("/"):
            raise _BadRequest(HTTPStatus.BAD_REQUEST)
        method, target, _version = parts
        if not method.isalpha() or not method.isupper():
            raise _BadRequest(HTTPStatus.BAD_REQUEST)
        return method, target.split("?", 1)[0]

    async def _route(self, method: str, path: str) -> tuple[HTTPStatus, str, bytes]:
        if path not in ("/healthz", "/readyz", "/metrics"):
            return HTTPStatus.NOT_FOUND, _JSON, _json({"error": "not found", "path": path})
        if method != "GET":
            return (HTTPStatus.METHOD_NOT_ALLOWED, _JSON,
                    _json({"error": "method not allowed", "allow": "GET"}))
        if path == "/metrics":
            payload, content_type = self._metrics.render()
            return HTTPStatus.OK, content_type, payload
        ok, checks = await (self._check_live() if path == "/healthz" else self._check_ready())
        status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
        return status, _JSON, _json({"status": "ok" if ok else "unavailable", "checks": checks})

    async def _check_live(self) -> tuple[bool, dict[str, object]]:
        try:
            return self._liveness()
        except Exception as exc:
            log.warning("liveness check raised", exc_info=True)
            return False, {"error": f"{type(exc).__name__}: {exc}"}

    async def _check_ready(self) -> tuple[bool, dict[str, object]]:
        # A hung dependency check must not hang the probe: past the timeout it is not ready.
        try:
            return await asyncio.wait_for(self._readiness(), self._check_timeout_s)
        except TimeoutError:
            return False, {"error": f"readiness checks timed out after {self._check_timeout_s} s"}
        except Exception as exc:
            log.warning("readiness check raised", exc_info=True)
            return False, {"error": f"{type(exc).__name__}: {exc}"}

    async def _respond(self, writer: asyncio.StreamWriter, status: HTTPStatus,
                       content_type: str, body: bytes) -> None:
        headers = [
            f"HTTP/1.1 {status.value} {status.phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "Connection: close",
        ]
        if status is HTTPStatus.METHOD_NOT_ALLOWED:
            headers.append("Allow: GET")
        writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + body)
        await asyncio.wait_for(writer.drain(), self._request_timeout_s)


def _json(obj: object) -> bytes:
    # default=str: a check may report a datetime or an enum; the probe still answers.
    return json.dumps(obj, default=str, sort_keys=True).encode()
