"""Fixtures for the three-node SASL_SSL cluster suite (`make test-cluster`, marker `cluster`).

The cluster is started once per session by the project's own `deploy.local.cluster.up()`
(beside the one-node stack, which the S3 side of these tests still uses) and stopped at the
end if this session started it. Its topics are the unprefixed contract topics the cluster's
ACLs name, so tests tell their traffic apart by request ids, not by topic prefix.

These tests are deselected unless the marker expression names `cluster` (`pytest -m
cluster`): a plain `pytest` run (make test) never starts three more brokers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumers.settings import Secret, Settings, StoreSettings
from deploy.local import cluster, stack

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "cluster" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("cluster") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


@pytest.fixture(scope="session")
def three_nodes() -> Iterator[None]:
    already = cluster.running()
    if not already:
        cluster.up(out=sys.stderr, timeout_s=300)
    yield
    if not already:
        cluster.down(out=sys.stderr)


@pytest.fixture
def role(three_nodes: None, bucket: str) -> Iterator[RoleSettings]:
    yield RoleSettings(bucket)


class RoleSettings:
    """Settings of one role on the cluster, with the session's bucket on the S3 server."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket

    def env(self, role: str) -> dict[str, str]:
        return cluster.role_settings(role)

    def __call__(self, role: str, **overrides: str) -> Settings:
        s = Settings.from_env({**cluster.role_settings(role), **overrides})
        return s.with_overrides(store={
            "endpoint": f"http://127.0.0.1:{stack.S3_PORT}", "access_key": stack.S3_ACCESS_KEY,
            "secret_key": Secret(stack.S3_SECRET_KEY), "bucket": self.bucket})

    @property
    def store(self) -> StoreSettings:
        return self("admin").store


def secrets() -> list[str]:
    return list(cluster.passwords().values())


def assert_no_secret(*texts: str, where: str = "") -> None:
    for text in texts:
        for secret in secrets():
            assert secret not in text, f"a password appears in {where or 'a log'}"


def node_logs() -> str:
    return "\n".join(n.log_file.read_text(errors="replace") for n in cluster.NODES
                     if Path(n.log_file).exists())
