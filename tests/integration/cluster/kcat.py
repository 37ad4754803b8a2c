"""kcat on the cluster: the librdkafka client the contract names for its other producers.

The kcat used is the one `python -m deploy.tools.install kcat` builds into the cache (kcat
1.7.1 with librdkafka 2.12.1: Debian's own links 2.0.2, which cannot log in with SCRAM to
Kafka 4). Both helpers run kcat as a subprocess with a 0600 config file holding the role's
login (never on argv), and timestamp what it prints as it prints it:

    KcatProducer: lines "KEY\\x1fJSON" -> kcat -P stdin (acks=all, idempotent); kcat -v -v -v
        says "Message delivered to partition P (offset O)" per acknowledged record
        -> delivered [(seconds, partition, offset)] (which records they are: read them back)
    KcatConsumer: kcat -C -o s@MS (no group) -> one value a line -> lines [(seconds, text)]
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from deploy.local import tls
from deploy.tools.install import installed_kcat

DELIVERED = re.compile(r"Message delivered to partition (\d+) \(offset (\d+)\)")
KEY_DELIMITER = "\x1f"


def kcat_path() -> str:
    found = installed_kcat()
    if found is None:
        pytest.fail("the cluster suite needs the kcat built with librdkafka >= 2.6.1: run "
                    "`python -m deploy.tools.install kcat` (make test-cluster does)")
    return str(found)


def write_config(path: Path, env: dict[str, str], *extra: str) -> Path:
    """A kcat -F file for the role whose VF_* settings `env` holds; 0600: it has the
    password."""
    tls.write_private(path, "\n".join([
        "security.protocol=SASL_SSL", "sasl.mechanisms=SCRAM-SHA-512",
        f"sasl.username={env['VF_KAFKA_SASL_USERNAME']}",
        f"sasl.password={env['VF_KAFKA_SASL_PASSWORD']}",
        f"ssl.ca.location={env['VF_KAFKA_SSL_CAFILE']}", *extra, ""]).encode())
    return path


class _Lines:
    """Reads one of a process's streams on a thread, each line with its arrival time."""

    def __init__(self, stream: IO[str] | None, started: float) -> None:
        assert stream is not None
        self.lines: list[tuple[float, str]] = []
        self._stream, self._started = stream, started
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in iter(self._stream.readline, ""):
            self.lines.append((time.monotonic() - self._started, line.rstrip("\n")))

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


class KcatProducer:
    def __init__(self, config: Path, bootstrap: str, topic: str, started: float) -> None:
        self.proc = subprocess.Popen(
            [kcat_path(), "-F", str(config), "-b", bootstrap, "-P", "-t", topic,
             "-K", KEY_DELIMITER, "-v", "-v", "-v",
             # the contract's partitioner; acks=all with idempotence, as our producers
             "-X", "partitioner=murmur2_random", "-X", "acks=all",
             "-X", "enable.idempotence=true", "-X", "linger.ms=5"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, bufsize=1)
        self._stderr = _Lines(self.proc.stderr, started)
        self.sent = 0

    def send(self, key: str, value: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{key}{KEY_DELIMITER}{value}\n")
        self.proc.stdin.flush()
        self.sent += 1

    def close(self, timeout_s: float) -> int:
        """EOF, then kcat waits for every outstanding delivery report before it exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout_s)
        self._stderr.join(10)
        return code

    @property
    def delivered(self) -> list[tuple[float, int, int]]:
        return [(at, int(m.group(1)), int(m.group(2))) for at, line in self._stderr.lines
                if (m := DELIVERED.search(line))]

    @property
    def log(self) -> str:
        return "\n".join(line for _, line in self._stderr.lines)


class KcatConsumer:
    def __init__(self, config: Path, bootstrap: str, topic: str, since_ms: int,
                 started: float) -> None:
        self.proc = subprocess.Popen(
            [kcat_path(), "-F", str(config), "-b", bootstrap, "-C", "-t", topic,
             "-o", f"s@{since_ms}", "-u", "-f", "%s\n"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1)
        self._stdout = _Lines(self.proc.stdout, started)
        self._stderr = _Lines(self.proc.stderr, started)

    @property
    def lines(self) -> list[tuple[float, str]]:
        return list(self._stdout.lines)

    def stop(self) -> str:
        """Ends kcat (it reads until stopped); its stderr, for the secret check."""
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(15)
        self._stdout.join(10)
        self._stderr.join(10)
        return "\n".join(line for _, line in self._stderr.lines)
