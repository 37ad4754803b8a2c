"""The three-node cluster's security as a client meets it: SASL_SSL with a CA file, one
principal per role, and refusals that are one clear line and an exit, never a retry loop."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from consumers.kafka import make_producer, security_kwargs
from consumers.kafka_access import explain
from deploy.local import cluster, tls
from deploy.local.security import create_acls, upsert_scram
from tests.integration.cluster.conftest import RoleSettings, assert_no_secret, node_logs
from tests.integration.cluster.kcat import kcat_path, write_config
from topics.acls import Grant
from topics.admin import admin_client, describe_topics, drift

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
REPO = Path(__file__).resolve().parents[3]


def cli(env: dict[str, str], *args: str, timeout_s: float = 90) -> tuple[int, str, float]:
    """`voicefactory ARGS` with these VF_* values over this process's environment: exit
    code, stdout + stderr, seconds taken."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "voicefactory", *args], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


async def test_topics_are_replicated_three_times_with_two_in_sync(role: RoleSettings) -> None:
    admin_settings = role("admin").kafka
    admin = admin_client(admin_settings.bootstrap, **security_kwargs(admin_settings))
    await admin.start()
    try:
        states = await describe_topics(admin)
    finally:
        await admin.close()
    assert {s.replication_factor for s in states} == {3}
    assert {s.configs["min.insync.replicas"] for s in states} == {"2"}
    assert drift(states, replication_factor=3, min_insync_replicas=2) == []
    code, out, _ = cli(role.env("admin"), "topics", "describe")
    assert code == 0, out
    assert "replication: factor 3, min.insync.replicas 2 (3 brokers)" in out
    assert_no_secret(out, where="topics describe's output")


def test_keys_and_passwords_are_private_files(role: RoleSettings) -> None:
    root = cluster.cluster_dir()
    private = [cluster.credentials_file(), *sorted((root / "tls").iterdir()),
               *(n.root / "server.properties" for n in cluster.NODES)]
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in private} == {"0o600"}
    assert stat.S_IMODE((root / "tls").stat().st_mode) == 0o700
    listening = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True,
                               check=True).stdout
    ports = [n.port for n in cluster.NODES] + [n.controller_port for n in cluster.NODES]
    for port in ports:
        local = [line.split()[3] for line in listening.splitlines()[1:]
                 if line.split()[3].endswith(f":{port}")]
        # loopback only, as IPv4 or the JVM's IPv4-mapped IPv6 form
        assert local and set(local) <= {f"127.0.0.1:{port}", f"[::ffff:127.0.0.1]:{port}"}, (
            port, local)


def test_a_worker_with_the_gateways_credentials_is_refused_at_once(
        role: RoleSettings) -> None:
    env = {**role.env("gateway"), "VF_ENGINE": "bench", "VF_METRICS_PORT": "-1",
           "VF_S3_BUCKET": role.bucket, "VF_INSTANCE_ID": "wrong-role"}
    code, out, took = cli(env, "worker", "--log-format", "text")
    assert code == 1, out
    last = out.strip().splitlines()[-1]
    # Which refusal comes first depends on the cluster's past: the worker replays the cancels
    # on tts.control before it joins its group, and reading one (the kcat test below writes
    # one) needs READ on tts.control, which the gateway lacks too. Either line is the answer.
    assert last in (
        "error: Kafka denied User:gateway access to consumer group vf-synth: no ACL allows "
        "it (run this process with the role that owns the group)",
        "error: Kafka denied User:gateway access to topic tts.control: no ACL allows it "
        "(run this process with the role that owns the topic, or grant the ACL)"), last
    assert took < 60
    assert_no_secret(out, where="the worker's log")


def test_a_wrong_password_fails_fast_and_names_the_user_not_the_password(
        role: RoleSettings) -> None:
    wrong = "not-" + role.env("worker")["VF_KAFKA_SASL_PASSWORD"]
    code, out, took = cli({**role.env("worker"), "VF_KAFKA_SASL_PASSWORD": wrong},
                          "topics", "describe")
    assert code == 1, out
    assert out.strip().splitlines()[-1] == (
        f"error: Kafka at {cluster.bootstrap()} refused the login of User:worker "
        "(SCRAM-SHA-512): wrong username or password (VF_KAFKA_SASL_USERNAME / "
        "VF_KAFKA_SASL_PASSWORD)")
    assert took < 30
    assert wrong not in out
    assert_no_secret(out)


def test_the_aggregator_with_a_wrong_password_says_so_in_one_line(role: RoleSettings) -> None:
    """faust alone would end in a traceback of "Unable to bootstrap"; the CLI asks first."""
    wrong = "not-" + role.env("aggregator")["VF_KAFKA_SASL_PASSWORD"]
    code, out, took = cli({**role.env("aggregator"), "VF_KAFKA_SASL_PASSWORD": wrong,
                           "VF_METRICS_PORT": "-1"}, "aggregator", "--port", "0")
    assert code == 1, out
    assert out.strip().splitlines() == [
        f"error: Kafka at {cluster.bootstrap()} refused the login of User:aggregator "
        "(SCRAM-SHA-512): wrong username or password (VF_KAFKA_SASL_USERNAME / "
        "VF_KAFKA_SASL_PASSWORD)"]
    assert took < 30
    assert_no_secret(out)


def test_an_unknown_ca_fails_fast_and_says_so(role: RoleSettings, tmp_path: Path) -> None:
    other_ca = tls.ensure_tls(tmp_path / "other", [])  # a CA that signed none of the nodes
    code, out, took = cli({**role.env("worker"), "VF_KAFKA_SSL_CAFILE": str(other_ca)},
                          "topics", "describe")
    assert code == 1, out
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"error: TLS to Kafka at 127.0.0.1:{cluster.NODES[0].port} failed: "
                           f"its certificate is not trusted by {other_ca} (")
    assert last.endswith("); set VF_KAFKA_SSL_CAFILE to the cluster's CA")
    assert took < 30
    assert_no_secret(out)


async def test_a_role_that_may_not_write_a_topic_is_told_which_and_who(
        role: RoleSettings) -> None:
    gateway = role("gateway").kafka
    producer = make_producer(gateway, request_timeout_ms=10_000)
    await producer.start()
    started = time.monotonic()
    try:
        with pytest.raises(TopicAuthorizationFailedError) as caught:
            await producer.send_and_wait("tts.results", b"{}", key=b"k")
    finally:
        await producer.stop()
    assert time.monotonic() - started < 10  # refused, not retried until a timeout
    assert explain(caught.value, gateway) == (
        "Kafka denied User:gateway access to topic tts.results: no ACL allows it (run this "
        "process with the role that owns the topic, or grant the ACL)")


def test_no_password_reaches_the_brokers_logs(role: RoleSettings) -> None:
    assert_no_secret(node_logs(), where="a broker's log")


def test_a_gateway_with_a_wrong_password_logs_why_and_exits(role: RoleSettings,
                                                            tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("")
    env = {**role.env("gateway"), "VF_KAFKA_SASL_PASSWORD": "wrong", "VF_METRICS_PORT": "-1",
           "VF_GATEWAY_HOST": "127.0.0.1", "VF_GATEWAY_PORT": "0",
           "VF_GATEWAY_KEYS_FILE": str(keys)}
    code, out, took = cli(env, "gateway")
    assert code != 0, out
    assert ("gateway cannot start: Kafka at " + cluster.bootstrap() + " refused the login of "
            "User:gateway (SCRAM-SHA-512)") in out
    assert took < 30
    assert_no_secret(out)


async def test_a_worker_that_may_not_read_the_requests_stops_naming_the_topic(
        role: RoleSettings) -> None:
    """A principal with everything a worker needs to start but READ on tts.requests (its
    group, metadata, a topic to write, the control topic): the first fetch is refused, the
    worker drains, stops and exits 1 with the topic and principal; no fetch retry loop."""
    password = "probe-" + uuid.uuid4().hex
    admin_kafka = role("admin").kafka
    admin = admin_client(admin_kafka.bootstrap, **security_kwargs(admin_kafka))
    await admin.start()
    try:
        await upsert_scram(admin, {"probe-no-read": password})
        await create_acls(admin, "User:probe-no-read", [
            Grant("group", "vf-synth-probe", "literal", "Read"),
            Grant("topic", "tts.requests", "literal", "Describe"),
            Grant("topic", "tts.requests.interactive", "literal", "Read"),
            Grant("topic", "tts.requests.shards", "literal", "Read"),
            Grant("topic", "tts.requests.interactive.shards", "literal", "Read"),
            Grant("topic", "tts.control", "literal", "Read"),
            Grant("topic", "tts.fleet", "literal", "Read"),
            Grant("topic", "tts.results", "literal", "Write"),
            Grant("topic", "tts.audio", "literal", "Write")])
    finally:
        await admin.close()
    env = {**role.env("worker"), "VF_KAFKA_SASL_USERNAME": "probe-no-read",
           "VF_KAFKA_SASL_PASSWORD": password, "VF_GROUP_ID": "vf-synth-probe",
           "VF_ENGINE": "bench", "VF_METRICS_PORT": "-1", "VF_S3_BUCKET": role.bucket,
           "VF_INSTANCE_ID": "probe-no-read", "VF_ROUTING": "voice"}
    code, out, took = await asyncio.to_thread(cli, env, "worker", "--log-format", "text")
    assert code == 1, out
    assert out.strip().splitlines()[-1] == (
        "error: Kafka denied User:probe-no-read access to topic tts.requests: no ACL allows "
        "it (run this process with the role that owns the topic, or grant the ACL)")
    assert out.count("fetch failed") == 0 and took < 90
    assert password not in out


def test_kcat_produces_over_sasl_ssl_as_the_gateway_and_the_worker_role_reads_it(
        role: RoleSettings, tmp_path: Path) -> None:
    """A librdkafka client (kcat) with the same CA and SCRAM login: the contract's other
    producers (DESIGN.md: partitioner murmur2_random) meet the same listener.

    librdkafka before 2.6.1 cannot log in with SCRAM to Kafka 4.x at all (it repeated the
    client nonce in its final message; Kafka 4 checks it strictly: confluentinc/librdkafka
    #4895), whatever the credentials; Debian's kcat links 2.0.2, so this is the kcat that
    deploy/tools/install.py builds with librdkafka 2.12.1."""
    kcat = kcat_path()
    version = _librdkafka_version(kcat)
    assert version >= (2, 6, 1), f"{kcat} links librdkafka {version}"
    env = role.env("gateway")
    config = write_config(tmp_path / "kcat.conf", env, "partitioner=murmur2_random")
    marker = f"kcat-{uuid.uuid4().hex[:8]}"
    produced = subprocess.run(
        [kcat, "-F", str(config), "-b", env["VF_KAFKA_BOOTSTRAP"], "-P", "-t", "tts.control",
         "-k", marker, "-X", "request.required.acks=all"],
        input=f'{{"schema": "tts.control.v1", "action": "cancel", "request_id": "{marker}"}}',
        capture_output=True, text=True, timeout=60, check=False)
    assert produced.returncode == 0, produced.stderr
    worker = role.env("worker")
    config = write_config(tmp_path / "kcat-worker.conf", worker)
    consumed = subprocess.run(
        [kcat, "-F", str(config), "-b", worker["VF_KAFKA_BOOTSTRAP"], "-C", "-t",
         "tts.control", "-o", "beginning", "-e", "-q", "-f", "%k\n"],
        capture_output=True, text=True, timeout=60, check=False)
    assert consumed.returncode == 0, consumed.stderr
    assert marker in consumed.stdout.split()
    assert_no_secret(produced.stderr, consumed.stderr, where="kcat's output")
    # the gateway's login may not read what it writes: librdkafka meets the same ACLs
    config = write_config(tmp_path / "kcat-gateway.conf", env)
    refused = subprocess.run(
        [kcat, "-F", str(config), "-b", env["VF_KAFKA_BOOTSTRAP"], "-C", "-t", "tts.control",
         "-o", "beginning", "-e", "-q"],
        capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0 and "authoriz" in refused.stderr.lower(), refused.stderr


def _librdkafka_version(kcat: str) -> tuple[int, ...]:
    out = subprocess.run([kcat, "-V"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(p) for p in match.groups()) if match else (0, 0, 0)
