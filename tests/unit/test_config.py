from __future__ import annotations

import pytest

from topics.config import Secret, Settings


def test_defaults_follow_the_design() -> None:
    s = Settings.from_env({})
    assert s.kafka_bootstrap == "127.0.0.1:9092"
    assert s.s3_endpoint == "http://127.0.0.1:9000"
    assert (s.max_inflight, s.metrics_port, s.group_id) == (2, 9108, "vf-synth")


def test_environment_overrides_and_types() -> None:
    s = Settings.from_env({"VF_MAX_INFLIGHT": "4", "VF_TOPIC_PREFIX": "staging.",
                           "VF_S3_SECRET_KEY": "hunter2"})
    assert s.max_inflight == 4
    assert s.topic_prefix == "staging."
    assert s.s3_secret_key.reveal() == "hunter2"


def test_secrets_never_print() -> None:
    s = Settings.from_env({"VF_S3_SECRET_KEY": "hunter2", "VF_KAFKA_SASL_PASSWORD": "pw"})
    assert "hunter2" not in repr(s) and "pw'" not in repr(s)
    assert str(Secret("x")) == "Secret('********')"


def test_bad_integer_names_the_variable() -> None:
    with pytest.raises(ValueError, match="VF_MAX_INFLIGHT must be an integer"):
        Settings.from_env({"VF_MAX_INFLIGHT": "lots"})
