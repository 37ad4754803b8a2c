"""The three-node cluster's config, certificates, credentials and grants (no server)."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from consumers.kafka import security_kwargs
from consumers.settings import Settings
from deploy.local import cluster, tls
from topics.acls import ROLES, grants


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_STATE_DIR", str(tmp_path))


def test_each_node_binds_loopback_on_its_own_ports_beside_the_one_node_stack() -> None:
    ports = {p for n in cluster.NODES for p in (n.port, n.controller_port)}
    assert len(ports) == 6 and not ports & {9092, 9093, 9000}
    props = cluster.server_properties(cluster.NODES[1], "pw")
    assert "listeners=SASL_SSL://127.0.0.1:19093,CONTROLLER://127.0.0.1:19193" in props
    assert "0.0.0.0" not in props
    assert "controller.quorum.voters=1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194" in props


def test_nothing_passes_without_an_acl_except_the_admin_and_the_nodes() -> None:
    props = cluster.server_properties(cluster.NODES[0], "pw").splitlines()
    assert "allow.everyone.if.no.acl.found=false" in props
    assert ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            in props)
    assert ("super.users=User:admin;User:CN=vf-node-1;User:CN=vf-node-2;User:CN=vf-node-3"
            in props)
    assert "listener.name.controller.ssl.client.auth=required" in props
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512" in props
    assert "min.insync.replicas=2" in props and "default.replication.factor=3" in props


def test_passwords_are_made_once_per_role_in_a_private_file() -> None:
    first = cluster.passwords()
    assert set(first) == set(cluster.ROLE_NAMES) and len(set(first.values())) == 4
    assert stat.S_IMODE(cluster.credentials_file().stat().st_mode) == 0o600
    assert cluster.passwords() == first


def test_certificates_name_the_node_and_loopback_and_chain_to_the_ca(tmp_path: Path) -> None:
    ca_path = tls.ensure_tls(tmp_path / "tls", [1, 2])
    for path in (tmp_path / "tls").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    chain = x509.load_pem_x509_certificates((tmp_path / "tls" / "node-2.pem").read_bytes())
    leaf, ca = chain[0], x509.load_pem_x509_certificate(ca_path.read_bytes())
    assert leaf.subject.rfc4514_string() == "CN=vf-node-2" == tls.node_principal(2)
    assert leaf.issuer == ca.subject and chain[1] == ca
    leaf.verify_directly_issued_by(ca)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # A second call keeps what exists: the nodes' certificates survive restarts.
    before = (tmp_path / "tls" / "node-1.pem").read_bytes()
    tls.ensure_tls(tmp_path / "tls", [1, 2, 3])
    assert (tmp_path / "tls" / "node-1.pem").read_bytes() == before
    assert (tmp_path / "tls" / "node-3.pem").exists()


def test_a_roles_env_is_what_its_clients_read_and_trusts_only_the_cluster_ca(
        tmp_path: Path) -> None:
    tls.ensure_tls(cluster.cluster_dir() / "tls", [1])
    env = cluster.role_settings("worker")
    kafka = Settings.from_env(env).kafka
    assert kafka.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert (kafka.security_protocol, kafka.sasl_mechanism, kafka.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "worker")
    assert kafka.sasl_password.reveal() == cluster.passwords()["worker"]
    context = security_kwargs(kafka)["ssl_context"]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "VoiceFactory local cluster CA"),),)]
    assert "worker" in "\n".join(cluster.env_lines("worker"))
    with pytest.raises(ValueError, match="role must be one of"):
        cluster.role_settings("root")


def test_roles_get_least_privilege() -> None:
    worker = {(g.resource, g.name, g.operation) for g in grants(ROLES["worker"])}
    assert ("topic", "tts.requests", "Read") in worker and ("group", "vf-synth", "Read") in worker
    assert ("topic", "tts.results", "Write") in worker
    assert not any(g.resource == "cluster" for r in ROLES.values() for g in grants(r))
    gateway = {(g.resource, g.name, g.operation) for g in grants(ROLES["gateway"])}
    assert ("topic", "tts.requests", "Read") not in gateway  # it produces them, never reads
    assert ("group", "vf-synth", "Read") not in gateway
    assert ("group", "vf-synth", "Describe") in gateway  # its lag check
    aggregator = grants(ROLES["aggregator"], prefix="t1.")
    assert {(g.name, g.pattern) for g in aggregator if g.resource == "group"} == {
        ("t1.vf-aggregator", "literal")}
    assert ("t1.vf-aggregator-", "prefixed") in {(g.name, g.pattern) for g in aggregator}
    assert grants(ROLES["admin"]) == []
