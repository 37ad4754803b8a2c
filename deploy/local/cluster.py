"""`voicefactory dev up|down|status|env --cluster`: a production-shaped Kafka on loopback.

Three KRaft nodes (each broker and controller) from the same Maven jars as the one-node stack,
beside it on other ports, with state in `<state dir>/cluster/`:

    up: install (cached) -> passwords (credentials.json) and TLS (tls/: a CA, a keystore
    per node) made once -> each node's server.properties -> format its storage once, with
    the admin's SCRAM credential in the bootstrap metadata (KIP-900) -> start the three JVMs
    (pid files in run/) -> wait until every client port answers -> as admin over SASL_SSL:
    SCRAM credentials for gateway, worker and aggregator, their ACLs (topics/acls.py), the
    contract's topics at replication factor 3 with min.insync.replicas 2.
    down: stop exactly these pids (never the one-node stack's).

Listeners per node N (all 127.0.0.1): SASL_SSL on 19091+N for clients and between brokers
(SCRAM-SHA-512; brokers log in as the admin), and CONTROLLER on 19191+N with mutual TLS
(a node's principal is its certificate's `CN=vf-node-N`). `StandardAuthorizer` with
`allow.everyone.if.no.acl.found=false`: only super users (admin and the three nodes) and
the ACLs granted here pass. Secrets and keys are files of mode 0600; nothing prints a
password except `dev env --cluster`, whose purpose it is.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from consumers.settings import state_dir
from deploy.local import install
from deploy.local.stack import (
    _HERE,
    Service,
    StackError,
    _spawn,
    await_exit,
    port_open,
    report_states,
)
from deploy.local.tls import ensure_tls, node_principal, write_private
from topics.specs import REPLICATION

NODE_IDS = (1, 2, 3)
CLIENT_PORT_BASE = 19091  # node N listens on 19091 + N
CONTROLLER_PORT_BASE = 19191
MECHANISM = "SCRAM-SHA-512"
ROLE_NAMES = ("admin", "gateway", "worker", "aggregator")
REPLICATION_FACTOR = REPLICATION.factor  # 3
MIN_INSYNC_REPLICAS = REPLICATION.min_insync  # 2
HEAP = ("-Xms128m", "-Xmx512m")  # three JVMs on a shared laptop


def cluster_dir() -> Path:
    return state_dir() / "cluster"


@dataclass(frozen=True)
class Node(Service):
    node_id: int = 0

    @property
    def pid_file(self) -> Path:
        return cluster_dir() / "run" / f"node-{self.node_id}.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def root(self) -> Path:
        return cluster_dir() / f"node-{self.node_id}"

    @property
    def controller_port(self) -> int:
        return CONTROLLER_PORT_BASE + self.node_id


NODES = tuple(Node(f"node-{n}", CLIENT_PORT_BASE + n, "kafka.Kafka", n) for n in NODE_IDS)


def bootstrap() -> str:
    return ",".join(f"127.0.0.1:{node.port}" for node in NODES)


def ca_file() -> Path:
    return cluster_dir() / "tls" / "ca.pem"


def credentials_file() -> Path:
    return cluster_dir() / "credentials.json"


def passwords() -> dict[str, str]:
    """Each role's password, made at the first `up` (random, 0600 file)."""
    path = credentials_file()
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        if set(stored) >= set(ROLE_NAMES):
            return stored
    made = {role: secrets.token_hex(24) for role in ROLE_NAMES}
    write_private(path, json.dumps(made, indent=1).encode())
    return made


def up(out: TextIO = sys.stdout, timeout_s: float = 240.0) -> None:
    libs = install.ensure_kafka(out)
    root = cluster_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = passwords()
    ensure_tls(root / "tls", list(NODE_IDS))
    cluster_id = _cluster_id()
    for node in NODES:
        _start_node(node, libs, cluster_id, secret["admin"], out)
    deadline = time.monotonic() + timeout_s
    for node in NODES:
        while not node.answering():
            if node.pid() is None:
                raise StackError(f"{node.name} exited during start-up; see {node.log_file}")
            if time.monotonic() > deadline:
                raise StackError(f"{node.name} did not answer on 127.0.0.1:{node.port} within "
                                 f"{timeout_s:.0f} s; see {node.log_file}")
            time.sleep(0.3)
    _configure(secret, out, deadline)
    print(f"ready: three Kafka nodes on {bootstrap()} (SASL_SSL, {MECHANISM}; state in {root}); "
          f"`voicefactory dev env --cluster --role worker` prints a role's settings", file=out)


def _cluster_id() -> str:
    path = cluster_dir() / "cluster-id"
    if not path.exists():
        path.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=") + "\n")
    return path.read_text().strip()


def _java(node: Node, libs: Path) -> list[str]:
    return ["java", *HEAP, "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.root / 'logs'}", "-cp", f"{libs}/*"]


def _start_node(node: Node, libs: Path, cluster_id: str, admin_password: str,
                out: TextIO) -> None:
    if node.pid() is not None:
        print(f"{node.name}: already running (pid {node.pid()})", file=out)
        return
    for port in (node.port, node.controller_port):
        if port_open(port):
            raise StackError(f"port 127.0.0.1:{port} is taken by a process this cluster did "
                             f"not start; free it before `dev up --cluster`")
    node.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    props = node.root / "server.properties"
    write_private(props, server_properties(node, admin_password).encode())  # holds a password
    java = _java(node, libs)
    data = node.root / "data"
    if not (data / "meta.properties").exists():
        print(f"{node.name}: formatting KRaft storage in {data} (cluster {cluster_id})", file=out)
        # KIP-900: the admin's SCRAM credential goes into the bootstrap metadata, so brokers
        # can log in to each other before any admin call could create it. It passes through
        # argv for this one short-lived local command (there is no other way to give it).
        fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format",
                              f"--cluster-id={cluster_id}", "--config", str(props),
                              "--add-scram", f"{MECHANISM}=[name=admin,password={admin_password}]"],
                             capture_output=True, text=True, check=False)
        if fmt.returncode != 0:
            tail = (fmt.stdout + fmt.stderr).replace(admin_password, "********")
            raise StackError(f"{node.name}: storage format failed:\n{tail}")
    pid = _spawn(node, [*java, "kafka.Kafka", str(props)])
    print(f"{node.name}: started Apache Kafka {install.KAFKA_VERSION} (pid {pid}), "
          f"SASL_SSL on 127.0.0.1:{node.port}, log {node.log_file}", file=out)


def server_properties(node: Node, admin_password: str) -> str:
    tls = cluster_dir() / "tls"
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in NODES)
    supers = ";".join(["User:admin", *(f"User:{node_principal(n)}" for n in NODE_IDS)])
    return "\n".join([
        "process.roles=broker,controller",
        f"node.id={node.node_id}",
        f"controller.quorum.voters={voters}",
        f"listeners=SASL_SSL://127.0.0.1:{node.port},"
        f"CONTROLLER://127.0.0.1:{node.controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{node.port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_SSL",
        "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL",
        # TLS: one keystore (key + chain) per node, the CA as truststore; both PEM.
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls / f'node-{node.node_id}.pem'}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={tls / 'ca.pem'}",
        "ssl.endpoint.identification.algorithm=https",
        "listener.name.controller.ssl.client.auth=required",
        # SASL: SCRAM only; brokers log in to each other as the admin.
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{admin_password}";',
        # Authorization: nothing passes without an ACL, except the super users.
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        f"super.users={supers}",
        f"log.dirs={node.root / 'data'}",
        "num.partitions=1",
        f"default.replication.factor={REPLICATION_FACTOR}",
        f"min.insync.replicas={MIN_INSYNC_REPLICAS}",
        "unclean.leader.election.enable=false",
        "auto.create.topics.enable=false",
        f"offsets.topic.replication.factor={REPLICATION_FACTOR}",
        "offsets.topic.num.partitions=12",
        f"transaction.state.log.replication.factor={REPLICATION_FACTOR}",
        f"transaction.state.log.min.isr={MIN_INSYNC_REPLICAS}",
        f"share.coordinator.state.topic.replication.factor={REPLICATION_FACTOR}",
        f"share.coordinator.state.topic.min.isr={MIN_INSYNC_REPLICAS}",
        "group.initial.rebalance.delay.ms=0",
        "log.segment.bytes=67108864",
        "",
    ])


def role_settings(role: str) -> dict[str, str]:
    """The VF_KAFKA_* values a process of `role` needs on this cluster."""
    if role not in ROLE_NAMES:
        raise ValueError(f"role must be one of {', '.join(ROLE_NAMES)}, got {role!r}")
    settings = {
        "VF_KAFKA_BOOTSTRAP": bootstrap(),
        "VF_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "VF_KAFKA_SASL_MECHANISM": MECHANISM,
        "VF_KAFKA_SASL_USERNAME": role,
        "VF_KAFKA_SASL_PASSWORD": passwords()[role],
        "VF_KAFKA_SSL_CAFILE": str(ca_file()),
    }
    if role == "aggregator":  # faust's changelog topic, like the contract's topics
        settings["VF_AGGREGATOR_REPLICATION_FACTOR"] = str(REPLICATION_FACTOR)
    return settings


def _configure(secret: dict[str, str], out: TextIO, deadline: float) -> None:
    """As admin: the roles' SCRAM credentials and ACLs, then the topics; retried while the
    nodes finish electing a controller and registering."""
    from consumers.kafka import security_kwargs
    from consumers.settings import KafkaSettings, Secret
    from deploy.local.security import create_acls, upsert_scram
    from topics.acls import ROLES, SUPER_USER, grants
    from topics.admin import admin_client, create_topics, describe_topics, drift

    admin_settings = KafkaSettings(bootstrap=bootstrap(), security_protocol="SASL_SSL",
                                   sasl_mechanism=MECHANISM, sasl_username="admin",
                                   sasl_password=Secret(secret["admin"]),
                                   ssl_cafile=str(ca_file()))
    created: list[str] = []

    async def attempt() -> None:
        admin = admin_client(admin_settings.bootstrap, **security_kwargs(admin_settings))
        await admin.start()
        try:
            await upsert_scram(admin, {r: p for r, p in secret.items() if r != SUPER_USER})
            for role in ROLES.values():
                await create_acls(admin, f"User:{role.name}", grants(role))
            created.extend(await create_topics(admin, replication_factor=REPLICATION_FACTOR,
                                               min_insync_replicas=MIN_INSYNC_REPLICAS))
            problems = drift(await describe_topics(admin), replication_factor=REPLICATION_FACTOR,
                             min_insync_replicas=MIN_INSYNC_REPLICAS)
            if problems:
                raise RuntimeError("; ".join(str(p) for p in problems))
            await admin.find_coordinator("vf-synth")
        finally:
            await admin.close()

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            asyncio.run(attempt())
        except Exception as exc:  # the quorum may still be forming
            last = exc
            time.sleep(1.0)
            continue
        print(f"security: SCRAM users {', '.join(r for r in ROLE_NAMES if r != SUPER_USER)} "
              f"and their ACLs in place", file=out)
        print(f"topics: {'created ' + ', '.join(created) if created else 'all present'} "
              f"(rf {REPLICATION_FACTOR}, min.insync.replicas {MIN_INSYNC_REPLICAS})", file=out)
        return
    raise StackError(f"could not configure the cluster before the deadline: {last}")


def down(out: TextIO = sys.stdout, grace_s: float = 30.0) -> None:
    """SIGTERM every node at once, then wait: one by one, the last node would wait out its
    controlled shutdown for a controller quorum that the first two took with them."""
    running = [(node, pid) for node in NODES if (pid := node.pid()) is not None]
    for node in NODES:
        if node.pid() is None:
            print(f"{node.name}: not running", file=out)
            node.pid_file.unlink(missing_ok=True)
    for _, pid in running:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for node, pid in running:
        await_exit(node, pid, deadline=deadline, out=out)
        print(f"{node.name}: stopped (pid {pid})", file=out)


def stop_node(node: Node, *, out: TextIO | None = None, grace_s: float = 30.0,
              kill: bool = False) -> None:
    """SIGTERM (SIGKILL when `kill`) the recorded pid of `node` and wait until it is gone."""
    out = out or io.StringIO()
    pid = node.pid()
    if pid is None:
        print(f"{node.name}: not running", file=out)
        node.pid_file.unlink(missing_ok=True)
        return
    os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    await_exit(node, pid, deadline=time.monotonic() + grace_s, out=out)
    print(f"{node.name}: {'killed' if kill else 'stopped'} (pid {pid})", file=out)


def start_node(node: Node, timeout_s: float = 120.0) -> None:
    """Start one stopped node again (fault runs) and wait until it answers."""
    libs = install.ensure_kafka(io.StringIO())
    _start_node(node, libs, _cluster_id(), passwords()["admin"], io.StringIO())
    deadline = time.monotonic() + timeout_s
    while not node.answering():
        if node.pid() is None or time.monotonic() > deadline:
            raise StackError(f"{node.name} did not come back; see {node.log_file}")
        time.sleep(0.2)


def status(out: TextIO = sys.stdout) -> bool:
    return report_states(NODES, out=out, width=7, protocol="SASL_SSL")


def env_lines(role: str) -> list[str]:
    return [f"export {k}={v}" for k, v in role_settings(role).items()]


def running() -> bool:
    return all(node.pid() is not None and node.answering() for node in NODES)

