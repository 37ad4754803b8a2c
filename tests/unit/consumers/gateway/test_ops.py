"""The gateway's listening sockets: what asyncio makes of a connection accepted on them."""

from __future__ import annotations

import asyncio
import socket

from consumers.gateway import ops


async def test_an_accepted_connection_sends_without_nagle() -> None:
    # A streamed answer writes its headers, then its first audio: with Nagle on, that second
    # small write waited for the client's delayed ACK, 40 ms on a keep-alive connection.
    listener = ops.bind("127.0.0.1", 0)
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accepted(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        nodelay.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=listener)
    try:
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(nodelay, 5) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


def test_a_bound_port_is_read_back_and_an_ipv6_host_serves_ipv6_only() -> None:
    with ops.bind("127.0.0.1", 0) as v4:
        assert v4.getsockname()[1] > 0
        assert v4.proto == socket.IPPROTO_TCP
    try:
        v6 = ops.bind("::1", 0)
    except OSError:  # no IPv6 loopback on this machine
        return
    with v6:
        assert v6.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
