"""ObjectStore's connection pool against a stub S3 server on loopback (no real server).

The stub answers PUT and HEAD as S3 does, counts the TCP connections it accepts and can be
told to drop a connection after reading the next request (a keep-alive connection the server
closed), so the tests see what the client does on the wire.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.storage import DEFAULT_POOL_SIZE, ObjectStore
from topics.errors import ErrorCode, VoiceFactoryError


class _StubS3(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.requests: list[str] = []
        self.drop_next = 0  # requests to answer by closing the connection instead
        self.stored: set[str] = set()  # paths PUT so far (read, answered or not)
        self.conflict = False  # answer conditional PUTs 409, as S3 does mid-race
        self.lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, object]:
        conn, addr = super().get_request()
        with self.lock:
            self.connections += 1
        return conn, addr


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a request says otherwise
    server: _StubS3

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with self.server.lock:
            self.server.requests.append(f"{self.command} {self.path}")
            drop = self.server.drop_next > 0
            self.server.drop_next -= int(drop)
        if drop:  # the request was read, no answer comes: the connection just dies
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        if body:
            self.send_header("Content-Type", "application/xml")
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self) -> None:
        with self.server.lock:
            exists = self.path in self.server.stored
            self.server.stored.add(self.path)
        if self.headers.get("If-None-Match") == "*" and (exists or self.server.conflict):
            code = "ConditionalRequestConflict" if self.server.conflict else "PreconditionFailed"
            self._answer(409 if self.server.conflict else 412, {}, body=(
                f"<Error><Code>{code}</Code><Message>no</Message>"
                f"<Resource>{self.path}</Resource><RequestId>1</RequestId></Error>").encode())
            return
        self._answer(200, {"ETag": '"0123456789abcdef"'})

    def do_HEAD(self) -> None:
        self._answer(200, {"ETag": '"0123456789abcdef"', "Content-Length": "3",
                           "Last-Modified": "Wed, 02 Dec 2026 22:00:00 GMT",
                           "x-amz-meta-sha256": "abc"})


@pytest.fixture
def stub() -> Iterator[_StubS3]:
    server = _StubS3()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _store(server: _StubS3, pool_size: int = DEFAULT_POOL_SIZE) -> ObjectStore:
    host, port = server.server_address[:2]
    return ObjectStore(endpoint=f"http://{host!s}:{port}", access_key="k", secret_key="s",
                       bucket="bkt", pool_size=pool_size)


def test_sequential_requests_reuse_one_keep_alive_connection(stub: _StubS3) -> None:
    store = _store(stub)
    for i in range(20):
        store.put(f"k{i}", b"abc", "audio/wav", metadata={"sha256": "abc"})
        info = store.stat(f"k{i}")
        assert info is not None and info.metadata["sha256"] == "abc"
    assert len(stub.requests) == 40
    assert stub.connections == 1


def test_the_pool_keeps_one_connection_per_concurrent_uploader(stub: _StubS3) -> None:
    uploaders, rounds = 6, 10
    store = _store(stub, pool_size=uploaders)
    barrier = threading.Barrier(uploaders)

    def upload(n: int) -> None:
        for i in range(rounds):
            barrier.wait()  # all uploaders in flight together, every round
            store.put(f"u{n}-{i}", b"abc", "audio/wav")

    threads = [threading.Thread(target=upload, args=(n,)) for n in range(uploaders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stub.requests) == uploaders * rounds
    # A pool smaller than the uploaders would discard the surplus after every round and
    # reconnect; sized to them, each uploader's connection is set up once.
    assert stub.connections <= uploaders


def test_a_pool_smaller_than_the_uploaders_reconnects(stub: _StubS3) -> None:
    """The contrast that makes the previous test mean something."""
    uploaders, rounds = 6, 10
    store = _store(stub, pool_size=1)
    barrier = threading.Barrier(uploaders)

    def upload(n: int) -> None:
        for i in range(rounds):
            barrier.wait()
            store.put(f"s{n}-{i}", b"abc", "audio/wav")

    threads = [threading.Thread(target=upload, args=(n,)) for n in range(uploaders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stub.connections > uploaders


def test_a_connection_that_dies_mid_request_is_retried_once_at_once(stub: _StubS3) -> None:
    store = _store(stub)
    store.put("warm", b"abc", "audio/wav")
    stub.drop_next = 1
    started = time.perf_counter()
    store.put("again", b"abc", "audio/wav")
    assert time.perf_counter() - started < 0.5  # no backoff on the first retry
    assert stub.requests[-2:] == ["PUT /bkt/again", "PUT /bkt/again"]
    assert stub.connections == 2


def test_a_second_failure_is_a_retryable_storage_error(stub: _StubS3) -> None:
    store = _store(stub)
    stub.drop_next = 2
    with pytest.raises(VoiceFactoryError) as info:
        store.put("k", b"abc", "audio/wav")
    assert info.value.retryable and info.value.code is ErrorCode.STORAGE_ERROR
    assert stub.requests == ["PUT /bkt/k", "PUT /bkt/k"]  # one retry, not more


def test_pool_size_is_validated_and_defaults_to_a_worker_s_concurrency() -> None:
    assert DEFAULT_POOL_SIZE >= 5  # 2 x max_inflight (2) dispatchers and a health check
    with pytest.raises(ValueError, match="pool_size"):
        ObjectStore(endpoint="http://127.0.0.1:1", access_key="k", secret_key="s", bucket="bkt",
                    pool_size=0)


def test_put_new_writes_once_and_reports_a_key_already_taken(stub: _StubS3) -> None:
    store = _store(stub)
    assert store.put_new("audio/a.wav", b"abc", "audio/wav", metadata={"sha256": "abc"})
    assert store.put_new("audio/a.wav", b"xyz", "audio/wav") is False  # 412: not an error
    assert store.put_new("audio/b.wav", b"abc", "audio/wav") is True


def test_put_new_whose_answer_was_lost_finds_its_own_object(stub: _StubS3) -> None:
    """The PUT landed, the connection died before the answer; the one retry on a fresh
    connection is refused (412): the caller then answers from the object, which is its own."""
    store = _store(stub)
    store.put("warm", b"abc", "audio/wav")
    stub.drop_next = 1
    assert store.put_new("audio/c.wav", b"abc", "audio/wav") is False
    assert stub.requests[-2:] == ["PUT /bkt/audio/c.wav"] * 2


def test_a_conditional_put_conflict_is_a_retryable_storage_error(stub: _StubS3) -> None:
    stub.conflict = True
    with pytest.raises(VoiceFactoryError) as raised:
        _store(stub).put_new("audio/d.wav", b"abc", "audio/wav")
    assert raised.value.code == ErrorCode.STORAGE_ERROR and raised.value.retryable
