"""SCRAM credentials and ACLs on the local cluster, sent as the admin principal.

    cluster.up() --upsert_scram(admin, {user: password})--> AlterUserScramCredentials
        (the salted password is computed here: the password never crosses the wire, nor
        argv, nor a log line)
    cluster.up() --create_acls(admin, grants)--> CreateAcls (Kafka keeps duplicates once)

aiokafka's admin client has neither call, so both go through its protocol layer: the two
request structs below follow Kafka's message definitions (AlterUserScramCredentials v0 is a
flexible version: compact strings and tagged fields).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, TypeAlias

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import CreateAclsRequest_v1
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from topics.acls import Grant

SCRAM_SHA_512 = 2  # ScramMechanism's wire code (1 is SCRAM-SHA-256)
SCRAM_ITERATIONS = 8192  # Kafka's minimum is 4096

_RESOURCE = {"topic": 2, "group": 3, "cluster": 4}
_PATTERN = {"literal": 3, "prefixed": 4}
_OPERATION = {"Read": 3, "Write": 4, "Create": 5, "Alter": 7, "Describe": 8,
              "DescribeConfigs": 10, "AlterConfigs": 11}
_ALLOW = 3


class SecurityError(RuntimeError):
    pass


class AlterUserScramCredentialsResponse_v0(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 51
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("results", CompactArray(("user", CompactString("utf-8")), ("error_code", Int16),
                                 ("error_message", CompactString("utf-8")),
                                 ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class AlterUserScramCredentialsRequest_v0(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 51
    API_VERSION = 0
    RESPONSE_TYPE = AlterUserScramCredentialsResponse_v0
    SCHEMA = Schema(
        ("deletions", CompactArray(("name", CompactString("utf-8")), ("mechanism", Int8),
                                   ("tags", TaggedFields))),
        ("upsertions", CompactArray(("name", CompactString("utf-8")), ("mechanism", Int8),
                                    ("iterations", Int32), ("salt", CompactBytes),
                                    ("salted_password", CompactBytes),
                                    ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class _AlterScram(Request[AlterUserScramCredentialsRequest_v0]):  # type: ignore[misc]
    API_KEY = 51

    def __init__(self, upsertions: list[tuple[str, int, int, bytes, bytes, dict[int, bytes]]]):
        self._upsertions = upsertions

    def build(self, request_struct_class: type[AlterUserScramCredentialsRequest_v0]
              ) -> AlterUserScramCredentialsRequest_v0:
        return request_struct_class([], self._upsertions, {})


_CreateAclsStruct: TypeAlias = CreateAclsRequest_v1


class _CreateAcls(Request[_CreateAclsStruct]):  # type: ignore[misc]
    API_KEY = 30

    def __init__(self, creations: list[tuple[int, str, int, str, str, int, int]]):
        self._creations = creations

    def build(self, request_struct_class: type[_CreateAclsStruct]) -> _CreateAclsStruct:
        return request_struct_class(self._creations)


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's SaltedPassword (RFC 5802: Hi() is PBKDF2 with the mechanism's HMAC)."""
    return hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)


async def upsert_scram(admin: AIOKafkaAdminClient, passwords: dict[str, str]) -> None:
    upsertions: list[tuple[str, int, int, bytes, bytes, dict[int, bytes]]] = []
    for user, password in passwords.items():
        salt = secrets.token_bytes(32)
        upsertions.append((user, SCRAM_SHA_512, SCRAM_ITERATIONS, salt,
                           salted_password(password, salt, SCRAM_ITERATIONS), {}))
    response: Any = await admin._send_request(_AlterScram(upsertions))
    failed = [f"{user}: error {code} {message or ''}".strip()
              for user, code, message, _ in response.results if code != 0]
    if failed:
        raise SecurityError("SCRAM credentials not stored: " + "; ".join(failed))


async def create_acls(admin: AIOKafkaAdminClient, principal: str, grants: list[Grant]) -> None:
    """ALLOW `principal` (`User:worker`) each grant from any host."""
    if not grants:
        return
    creations = [(_RESOURCE[g.resource], g.name, _PATTERN[g.pattern], principal, "*",
                  _OPERATION[g.operation], _ALLOW) for g in grants]
    response: Any = await admin._send_request(_CreateAcls(creations))
    failed = [f"{g.operation} {g.resource} {g.name}: error {code} {message or ''}".strip()
              for g, (code, message) in zip(grants, response.creation_responses, strict=True)
              if code != 0]
    if failed:
        raise SecurityError(f"ACLs for {principal} not created: " + "; ".join(failed))
