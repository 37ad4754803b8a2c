"""`voicefactory dev up|down|status|env`: the loopback stack the demo and tests run on.

up: install (cached) -> format KRaft storage once -> start Kafka and the S3 server as
detached processes with pid files under `<state dir>/run/` -> wait until both answer ->
create the DESIGN.md topics and the bucket (`up --kafka-tmpfs`: the broker's log dir in RAM,
kafka_data_dir). down: stop exactly the pids recorded (after checking the process still is
ours), wait, escalate to SIGKILL. Everything binds to 127.0.0.1. The state dir is
`consumers.settings.state_dir()`: VF_STATE_DIR, else the `.vf/` of the checkout the command
runs in, else the per-user state folder.

The module also implements `bench.stack.LocalStack` (all_answering, ensure_up,
broker_started_here, restart_broker, store_started_here, kill_store), which the CLI hands
to the benchmarks.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from consumers.settings import state_dir
from deploy.local import install

KAFKA_PORT = 9092
CONTROLLER_PORT = 9093
S3_PORT = 9000
S3_ACCESS_KEY = "voicefactory"
S3_SECRET_KEY = "voicefactory-secret"  # noqa: S105 - loopback-only dev credential
_HERE = Path(__file__).resolve().parent
TMPFS = Path("/dev/shm")  # noqa: S108 - a per-user, per-checkout folder is made inside


class StackError(RuntimeError):
    pass


@dataclass(frozen=True)
class Service:
    name: str
    port: int
    marker: str  # a string the process's command line must contain for it to be ours

    @property
    def pid_file(self) -> Path:
        return state_dir() / "run" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return state_dir() / self.name / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded process while it lives, else None (exited, a zombie, or the pid was
        reused by another process)."""
        try:
            fields = self.pid_file.read_text().split()
            pid = int(fields[0])
            started = int(fields[1]) if len(fields) > 1 else None
        except (FileNotFoundError, ValueError, IndexError):
            return None
        if started is None:  # a pid file written before start times were recorded
            return pid if _cmdline_contains(pid, self.marker) else None
        return pid if _alive_since(pid, started) else None

    def answering(self) -> bool:
        return port_open(self.port)


KAFKA = Service("kafka", KAFKA_PORT, "kafka.Kafka")
S3 = Service("s3", S3_PORT, "versitygw")
SERVICES = (KAFKA, S3)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _cmdline_contains(pid: int, marker: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker.encode() in raw


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
    rest = raw[raw.rindex(")") + 2:].split()
    return rest[0], int(rest[19])  # fields 3 and 22


def _alive_since(pid: int, started: int) -> bool:
    """The process that started at `started` still runs. Not the command line: a JVM's
    /proc/<pid>/cmdline reads empty for a moment while its launcher execs (seen here: 1 start
    in 30), which once made `up` report a starting broker as exited; the start time holds
    across exec and tells a reused pid apart."""
    state = _proc_state(pid)
    return state is not None and state[1] == started and state[0] not in ("Z", "X", "x")


def up(out: TextIO = sys.stdout, timeout_s: float = 120.0, *, kafka_tmpfs: bool = False) -> None:
    libs = install.ensure_kafka(out)
    gateway = install.ensure_versitygw(out)
    _start_kafka(libs, out, tmpfs=kafka_tmpfs)
    _start_s3(gateway, out)
    deadline = time.monotonic() + timeout_s
    for service in SERVICES:
        while not service.answering():
            if service.pid() is None:
                raise StackError(f"{service.name} exited during start-up; see {service.log_file}")
            if time.monotonic() > deadline:
                raise StackError(f"{service.name} did not answer on 127.0.0.1:{service.port} "
                                 f"within {timeout_s:.0f} s; see {service.log_file}")
            time.sleep(0.2)
    _bootstrap_contents(out, deadline)


def _bootstrap_contents(out: TextIO, deadline: float) -> None:
    """Topics and bucket; imported late so `dev down` works without the Python deps."""
    from deploy.local.bootstrap import ensure_bucket, ensure_topics

    ensure_topics(f"127.0.0.1:{KAFKA_PORT}", out, deadline)
    ensure_bucket(f"http://127.0.0.1:{S3_PORT}", S3_ACCESS_KEY, S3_SECRET_KEY, "voicefactory",
                  out, deadline)
    print(f"ready: Kafka on 127.0.0.1:{KAFKA_PORT}, S3 on http://127.0.0.1:{S3_PORT} "
          f"(state in {state_dir()}); `voicefactory dev env` prints the settings", file=out)


LOG_KEEP_BYTES = 64 << 20  # a service log over this at start moves to `<log>.1`


def _rotate(log_file: Path) -> None:
    """One previous log kept beside the new one: a broker logs every partition it creates
    and deletes at INFO, and a day of tests and benches on one stack wrote 460 MB."""
    if log_file.is_file() and log_file.stat().st_size > LOG_KEEP_BYTES:
        log_file.replace(log_file.with_name(log_file.name + ".1"))


def _spawn(service: Service, cmd: list[str], env: dict[str, str] | None = None) -> int:
    service.pid_file.parent.mkdir(parents=True, exist_ok=True)
    service.log_file.parent.mkdir(parents=True, exist_ok=True)
    _rotate(service.log_file)
    with open(service.log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    # The start time beside the pid: an identity that survives exec and tells a reused pid
    # apart. A process gone already gets the pid alone, which pid() then finds not ours.
    state = _proc_state(proc.pid)
    service.pid_file.write_text(f"{proc.pid} {state[1]}\n" if state else f"{proc.pid}\n")
    return proc.pid


def _check_port_free(service: Service) -> None:
    if service.answering():
        raise StackError(f"port 127.0.0.1:{service.port} is taken by a process this stack did not "
                         f"start; stop it or free the port before `dev up`")


def kafka_data_dir(*, tmpfs: bool, out: TextIO) -> Path:
    """The broker's log.dirs: `<state dir>/kafka/data`, or with `tmpfs` a link there to a
    folder of this user's in /dev/shm, kept by later `up`s with or without the flag (until
    the machine restarts, which empties it: the broker then starts on a fresh store).

    Why RAM: on a disk whose reads are slow (the 2-core VMs the benchmarks ran on), the first
    append to each new 4-KB page of a partition's `.index` / `.timeindex` takes a major page
    fault, about 45 ms, and the producer's next sends wait behind it; a bench on fresh topics
    pays it on every partition (docs/benchmarks.md, "Machine and conditions")."""
    data = state_dir() / "kafka" / "data"
    if data.is_symlink():
        target = data.readlink()
        if not target.is_dir():
            print(f"kafka: {target} is gone (the machine restarted?): a fresh store there",
                  file=out)
            target.mkdir(parents=True, mode=0o700)
        return data
    if not tmpfs:
        return data
    if data.exists():
        raise StackError(f"Kafka's data is on disk in {data}; `voicefactory dev down` and "
                         f"delete that folder (its topics go with it) to start it on tmpfs")
    if not TMPFS.is_dir():
        raise StackError(f"--kafka-tmpfs needs {TMPFS} (a tmpfs); this machine has none")
    tag = hashlib.sha256(str(state_dir().resolve()).encode()).hexdigest()[:10]
    target = TMPFS / f"voicefactory-{os.getuid()}-{tag}" / "kafka-data"
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    data.parent.mkdir(parents=True, exist_ok=True)
    data.symlink_to(target)
    print(f"kafka: data in RAM ({target}, linked from {data})", file=out)
    return data


def _start_kafka(libs: Path, out: TextIO, *, tmpfs: bool) -> None:
    if KAFKA.pid() is not None:
        print(f"kafka: already running (pid {KAFKA.pid()})", file=out)
        return
    _check_port_free(KAFKA)
    root = state_dir() / "kafka"
    data = kafka_data_dir(tmpfs=tmpfs, out=out)
    props = root / "server.properties"
    root.mkdir(parents=True, exist_ok=True)
    props.write_text(_server_properties(data))
    classpath = f"{libs}/*"
    java = ["java", "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={root / 'logs'}", "-cp", classpath]
    if not (data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        print(f"kafka: formatting KRaft storage in {data} (cluster {cluster_id})", file=out)
        # `--cluster-id=` form: a URL-safe base64 ID may start with "-", which argparse
        # would read as an option.
        fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format",
                              f"--cluster-id={cluster_id}", "--config", str(props)],
                             capture_output=True, text=True, check=False)
        if fmt.returncode != 0:
            raise StackError(f"kafka storage format failed:\n{fmt.stdout}{fmt.stderr}")
    pid = _spawn(KAFKA, [*java, "kafka.Kafka", str(props)])
    print(f"kafka: started Apache Kafka {install.KAFKA_VERSION} (pid {pid}), "
          f"log {KAFKA.log_file}", file=out)


def _server_properties(data: Path) -> str:
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{CONTROLLER_PORT}",
        f"listeners=PLAINTEXT://127.0.0.1:{KAFKA_PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{KAFKA_PORT}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={data}",
        "num.partitions=1",
        "auto.create.topics.enable=false",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=12",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        # One node: nothing to wait for before the first rebalance.
        "group.initial.rebalance.delay.ms=0",
        "log.segment.bytes=67108864",
        "",
    ])


def _start_s3(binary: Path, out: TextIO) -> None:
    if S3.pid() is not None:
        print(f"s3: already running (pid {S3.pid()})", file=out)
        return
    _check_port_free(S3)
    data = state_dir() / "s3" / "data"
    sidecar = state_dir() / "s3" / "meta"
    data.mkdir(parents=True, exist_ok=True)
    sidecar.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, ROOT_ACCESS_KEY=S3_ACCESS_KEY, ROOT_SECRET_KEY=S3_SECRET_KEY)
    # Keys go through the environment, not argv, so `ps` does not show the secret.
    # --keep-alive: without it the gateway closes every connection after one answer, and each
    # worker upload pays a new TCP connection (docs/benchmarks.md, capacity).
    pid = _spawn(S3, [str(binary), "--port", f"127.0.0.1:{S3_PORT}", "--quiet", "--keep-alive",
                      # Object metadata in sidecar files: works on filesystems without xattrs.
                      "posix", "--sidecar", str(sidecar), str(data)], env=env)
    print(f"s3: started Versity S3 Gateway {install.VERSITYGW_VERSION} (pid {pid}), "
          f"log {S3.log_file}", file=out)


def down(out: TextIO = sys.stdout, grace_s: float = 30.0) -> None:
    for service in reversed(SERVICES):
        pid = service.pid()
        if pid is None:
            print(f"{service.name}: not running", file=out)
            service.pid_file.unlink(missing_ok=True)
            continue
        os.kill(pid, signal.SIGTERM)
        await_exit(service, pid, deadline=time.monotonic() + grace_s, out=out)
        print(f"{service.name}: stopped (pid {pid})", file=out)


def await_exit(service: Service, pid: int, *, deadline: float, out: TextIO) -> None:
    """Wait until the signalled `pid` of `service` is gone, SIGKILL it at `deadline`, and
    drop its pid file (the local stack's and the cluster's nodes alike)."""
    while service.pid() == pid and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.1)
    if service.pid() == pid:
        os.kill(pid, signal.SIGKILL)
        print(f"{service.name}: did not stop in time, killed", file=out)
    service.pid_file.unlink(missing_ok=True)


def restart_broker(timeout_s: float = 120.0) -> None:
    """SIGTERM the broker this checkout started, wait until it is gone, start it again.

    For fault runs (tests and benchmarks): the workers meanwhile see a broker outage.
    """
    stop_broker()
    up(out=io.StringIO(), timeout_s=timeout_s)


def stop_broker() -> None:
    """SIGTERM the broker this checkout started and wait (60 s at most) until it is gone; a
    fault run brings it back with `ensure_up`."""
    pid = KAFKA.pid()
    if pid is None:
        raise RuntimeError("the broker is not running from this state dir")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while KAFKA.pid() is not None and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.2)


def _reap(pid: int) -> None:
    # When the stack was started by this very process (tests), collect the zombie.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def all_answering() -> bool:
    return all(service.answering() for service in SERVICES)


def ensure_up(timeout_s: float = 120.0) -> None:
    """`up` without its narration: for fault runs that bring a stopped server back."""
    up(out=io.StringIO(), timeout_s=timeout_s)


def broker_started_here() -> bool:
    return KAFKA.pid() is not None


def store_started_here() -> bool:
    return S3.pid() is not None


def server_pids() -> dict[str, int]:
    """The pids of the servers running from this stack's pid files, by service name."""
    return {service.name: pid for service in SERVICES if (pid := service.pid()) is not None}


def kill_store() -> None:
    pid = S3.pid()
    if pid is None:
        raise RuntimeError("the S3 server is not running from this state dir")
    os.kill(pid, signal.SIGKILL)
    _reap(pid)


def status(out: TextIO = sys.stdout) -> bool:
    return report_states(SERVICES, out=out)


def report_states(services: Sequence[Service], *, out: TextIO, width: int = 6,
                  protocol: str = "") -> bool:
    """One line per service (running, started but silent, not ours, stopped); True when
    every one is running and answering. `protocol` is said after the address."""
    healthy = True
    for service in services:
        pid = service.pid()
        answering = service.answering()
        where = f"127.0.0.1:{service.port}{f' ({protocol})' if protocol else ''}"
        if pid is not None and answering:
            state = f"running (pid {pid}), answering on {where}"
        elif pid is not None:
            state = f"started (pid {pid}) but not answering on {where}"
            healthy = False
        elif answering:
            state = f"not ours: port 127.0.0.1:{service.port} answers but no pid file matches"
            healthy = False
        else:
            state = "stopped"
            healthy = False
        print(f"{service.name:{width}} {state}", file=out)
    return healthy


def env_lines() -> list[str]:
    return [
        f"export VF_KAFKA_BOOTSTRAP=127.0.0.1:{KAFKA_PORT}",
        "export VF_TOPIC_PREFIX=",
        f"export VF_S3_ENDPOINT=http://127.0.0.1:{S3_PORT}",
        f"export VF_S3_ACCESS_KEY={S3_ACCESS_KEY}",
        f"export VF_S3_SECRET_KEY={S3_SECRET_KEY}",
        "export VF_S3_BUCKET=voicefactory",
    ]
