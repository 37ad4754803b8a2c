"""nginx config and access log (pure), and a real nginx in front of real model servers."""

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bench.modelserver import ModelServer
from bench.nginx import NEXT_UPSTREAM, Nginx, config, free_port, parse_access_log
from bench.peerload import HttpLoad, account
from tests.unit.bench.test_modelserver import FakeEngine, request, serve

REPO = Path(__file__).resolve().parents[3]


def test_config_balances_least_conn_with_keepalive_and_retries_posts() -> None:
    text = config(port=8080, upstreams=[9001, 9002], folder=Path("/w/ng"))
    assert "least_conn;" in text
    assert "server 127.0.0.1:9001 max_fails=1 fail_timeout=10s;" in text
    assert "server 127.0.0.1:9002 max_fails=1 fail_timeout=10s;" in text
    assert "keepalive 16;" in text
    assert 'proxy_set_header Connection "";' in text and "proxy_http_version 1.1;" in text
    assert f"proxy_next_upstream {NEXT_UPSTREAM};" in text
    assert "non_idempotent" in NEXT_UPSTREAM and "error" in NEXT_UPSTREAM
    assert "listen 127.0.0.1:8080;" in text
    assert "pid /w/ng/nginx.pid;" in text and "daemon off;" in text
    assert "/w/ng/access.log" in text
    assert "\nuser " not in text  # never asks for root's user switch
    with pytest.raises(ValueError, match="at least one upstream"):
        config(port=1, upstreams=[], folder=Path("/w"))


def test_access_log_lines_name_every_upstream_tried() -> None:
    log = ('1764720000.123 200 0.305 "127.0.0.1:9001" "200"\n'
           '1764720000.456 200 0.612 "127.0.0.1:9001, 127.0.0.1:9002" "502, 200"\n'
           '1764720001.000 502 0.001 "-" "-"\n'
           "garbage\n")
    lines = parse_access_log(log)
    assert len(lines) == 3
    assert lines[0].upstreams == ("127.0.0.1:9001",) and not lines[0].retried
    assert lines[1].upstreams == ("127.0.0.1:9001", "127.0.0.1:9002") and lines[1].retried
    assert lines[1].upstream_statuses == ("502", "200")
    assert lines[2].status == 502 and lines[2].upstreams == ()
    assert lines[1].at == pytest.approx(1764720000.456)


needs_nginx = pytest.mark.skipif(shutil.which("nginx") is None and
                                 not Path("/usr/sbin/nginx").exists(),
                                 reason="nginx is not installed (make setup)")

SLOW_SERVER = """
import sys, time, uvicorn
from bench.modelserver import ModelServer
from topics.events import SynthesisResult
def handle(r):
    time.sleep(30)
    return SynthesisResult(request_id=r.request_id, voice_id=r.voice_id, status="succeeded",
                           completed_at="x", worker="slow")
uvicorn.run(ModelServer(handle, threads=2), host="127.0.0.1", port=int(sys.argv[1]),
            lifespan="off", log_level="warning")
"""


@pytest.fixture
def folder() -> Iterator[Path]:
    # Not under pytest's tmp_path: its parents are 0700, and nginx runs as nobody under root.
    path = Path(tempfile.mkdtemp(prefix="vf-nginx-"))
    path.chmod(0o755)
    yield path / "nginx"
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def fast() -> AsyncIterator[tuple[str, FakeEngine]]:
    engine = FakeEngine()
    async for url in serve(ModelServer(engine, threads=2)):
        yield url, engine


@needs_nginx
async def test_nginx_retries_on_another_server_when_one_is_killed_mid_request(
        folder: Path, fast: tuple[str, FakeEngine]) -> None:
    slow_port = free_port()
    slow = subprocess.Popen([sys.executable, "-c", SLOW_SERVER,  # noqa: ASYNC220 - started once
                             str(slow_port)], cwd=REPO)
    proxy: Nginx | None = None
    try:
        for _ in range(200):  # the slow server listens within a few seconds
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", slow_port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        fast_port = int(fast[0].rsplit(":", 1)[1])
        proxy = Nginx(folder, [slow_port, fast_port])
        await asyncio.to_thread(proxy.start)
        if os.geteuid() == 0:
            assert proxy.proc is not None
            assert Path(f"/proc/{proxy.proc.pid}/status").read_text().count("65534") >= 1
        async with HttpLoad(proxy.url, timeout_s=20) as http:
            sending = asyncio.create_task(http.paced([request(f"k{i}") for i in range(4)],
                                                     rate=100))
            await asyncio.sleep(1.0)  # least_conn put two on each; the slow ones hang
            os.kill(slow.pid, signal.SIGKILL)
            started = time.monotonic()
            await sending
        row = account(http.sent, http.answers)
        assert row["lost"] == 0 and row["ok"] == 4
        assert time.monotonic() - started < 5  # retried at once, not after a timeout
        await asyncio.to_thread(proxy.stop)
        lines = proxy.access_log()
        assert len(lines) == 4
        assert sum(line.retried for line in lines) == 2
        assert all(line.status == 200 for line in lines)
        assert proxy.proc is not None and proxy.proc.poll() is not None
    finally:
        slow.kill()
        slow.wait()
        if proxy is not None:
            await asyncio.to_thread(proxy.stop)


@needs_nginx
async def test_without_any_server_left_the_client_gets_an_error_and_it_counts_lost(
        folder: Path) -> None:
    proxy = Nginx(folder, [free_port()])  # nobody listens there
    await asyncio.to_thread(proxy.start)
    try:
        async with HttpLoad(proxy.url, timeout_s=10) as http:
            await http.paced([request("gone")], rate=10)
        row = account(http.sent, http.answers)
        assert (row["lost"], row["errors"], row["ok"]) == (1, 1, 0)
        assert http.answers["gone"].detail == "502"
    finally:
        await asyncio.to_thread(proxy.stop)
    assert proxy.pid() is None or not Path(f"/proc/{proxy.pid()}").exists()
