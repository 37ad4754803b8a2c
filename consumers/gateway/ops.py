"""The gateway's operator listener: /healthz, /readyz and /metrics on their own port.

    `serve(gateway)` binds two sockets on VF_GATEWAY_HOST: VF_GATEWAY_PORT (the API) and
    VF_GATEWAY_OPS_PORT (default 9110), and runs ONE uvicorn server over both:
      connection -> `PortRouter`: the local port it arrived on
        == the ops port -> `build_ops_app` (the probes and metrics; no key, no guard)
        else            -> the API app (consumers.gateway.app: /v1, /openapi.json, /console)
      lifespan          -> the API app (it starts and stops the `Gateway`)
The API app has no /healthz, /readyz or /metrics route (404 there), so an Ingress or proxy in
front of the API port cannot expose them, whatever its rules; deploy/checks/gateway_policy.py
also fails an Ingress that routes the ops port or /metrics.

Why one server over two sockets rather than two servers: one signal handler, one graceful
shutdown and one lifespan, so SIGTERM drains both as before; two uvicorn servers in one
process would each capture SIGTERM and stop in an order nobody chose.
"""

from __future__ import annotations

import socket

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers.gateway.runtime import Gateway


async def healthz(request: Request) -> Response:
    return Response(b'{"status": "ok"}', media_type="application/json")


async def readyz(request: Request) -> Response:
    ok, checks = request.app.state.gateway.readiness()
    body = orjson.dumps({"status": "ok" if ok else "unavailable", "checks": checks})
    return Response(body, 200 if ok else 503, media_type="application/json")


async def metrics(request: Request) -> Response:
    payload, content_type = request.app.state.gateway.metrics.render()
    return Response(payload, media_type=content_type)


def build_ops_app(gateway: Gateway) -> Starlette:
    app = Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz),
                            Route("/metrics", metrics)])
    app.state.gateway = gateway
    return app


class PortRouter:
    """One ASGI app over two listeners: the ops port's connections to `ops`, every other
    connection and the lifespan to `api`."""

    def __init__(self, api: ASGIApp, ops: ASGIApp, ops_port: int) -> None:
        self.api = api
        self.ops = ops
        self.ops_port = ops_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if scope["type"] != "lifespan" and server is not None and server[1] == self.ops_port:
            await self.ops(scope, receive, send)
            return
        await self.api(scope, receive, send)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one (read it back).

    Made with proto IPPROTO_TCP, not 0 as `socket.create_server` makes it: asyncio sets
    TCP_NODELAY only on a connection whose socket says IPPROTO_TCP, and an accepted one
    inherits the listener's. Without it a streamed answer's first audio (its second write,
    after the headers) waited under Nagle for the client's delayed ACK: 40 ms on every
    request of a keep-alive connection but its first (docs/gateway.md, "Measured")."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # as create_server: an IPv6 host serves IPv6 only
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def server(api: ASGIApp, ops: ASGIApp, *, host: str, port: int, ops_port: int,
           ) -> tuple[uvicorn.Server, list[socket.socket]]:
    """The uvicorn server and its two bound sockets (API first); `serve(sockets=...)` runs
    it. Ports may be 0 (tests): the sockets hold the ports picked."""
    if port == ops_port and port != 0:
        raise ValueError(f"VF_GATEWAY_OPS_PORT must differ from VF_GATEWAY_PORT ({port})")
    api_sock = bind(host, port)
    try:
        ops_sock = bind(host, ops_port)
    except OSError:
        api_sock.close()
        raise
    picked = int(ops_sock.getsockname()[1])
    # No access log: our own metrics count requests, and a log line per request is noise.
    config = uvicorn.Config(PortRouter(api, ops, picked), log_config=None, access_log=False,
                            lifespan="on", timeout_graceful_shutdown=30)
    return uvicorn.Server(config), [api_sock, ops_sock]


async def serve(gateway: Gateway, api: ASGIApp) -> None:
    """`voicefactory gateway`: the API and the ops listener until SIGTERM / SIGINT."""
    limits = gateway.settings.gateway
    srv, sockets = server(api, build_ops_app(gateway), host=limits.host, port=limits.port,
                          ops_port=limits.ops_port)
    try:
        await srv.serve(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
