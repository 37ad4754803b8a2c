"""Access failures become one line naming the principal and the topic or group (no broker:
the real refusals are in tests/integration/cluster)."""

from __future__ import annotations

from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from consumers.kafka_access import explain, is_access_error
from consumers.settings import KafkaSettings, Secret

SCRAM = KafkaSettings(bootstrap="b1:9093", security_protocol="SASL_SSL",
                      sasl_mechanism="SCRAM-SHA-512", sasl_username="gateway",
                      sasl_password=Secret("hunter2"))


def test_a_denied_topic_or_group_names_it_and_the_principal() -> None:
    topic = explain(TopicAuthorizationFailedError({"tts.requests", "tts.control"}), SCRAM)
    assert topic is not None
    assert topic.startswith("Kafka denied User:gateway access to topic tts.control, "
                            "tts.requests: no ACL allows it")
    group = explain(GroupAuthorizationFailedError("vf-synth"), SCRAM)
    assert group is not None and "User:gateway access to consumer group vf-synth" in group
    plaintext = explain(GroupAuthorizationFailedError("g"), KafkaSettings())
    assert plaintext is not None and "User:ANONYMOUS" in plaintext


def test_a_refused_login_names_the_user_never_the_password() -> None:
    line = explain(SaslAuthenticationFailed("invalid credentials"), SCRAM)
    assert line == ("Kafka at b1:9093 refused the login of User:gateway (SCRAM-SHA-512): "
                    "wrong username or password (VF_KAFKA_SASL_USERNAME / VF_KAFKA_SASL_PASSWORD)")
    assert "hunter2" not in line


def test_only_refusals_are_access_errors() -> None:
    assert is_access_error(TopicAuthorizationFailedError("t"))
    assert is_access_error(SaslAuthenticationFailed())
    assert not is_access_error(KafkaConnectionError("broker down"))  # that one may heal
    assert explain(KafkaConnectionError("x"), SCRAM) is None
