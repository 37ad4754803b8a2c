"""Settings from VF_* variables: defaults, groups, types, secrets, to_env, the state dir."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from consumers.settings import Secret, Settings, WorkerSettings, find_checkout, state_dir
from pipeline.engines import EngineOptions


def test_defaults_follow_the_design() -> None:
    s = Settings.from_env({})
    assert s.kafka.bootstrap == "127.0.0.1:9092"
    assert s.store.endpoint == "http://127.0.0.1:9000"
    assert (s.worker.max_inflight, s.worker.metrics_port, s.worker.group_id) == (
        2, 9108, "vf-synth")


def test_environment_overrides_and_types() -> None:
    s = Settings.from_env({"VF_MAX_INFLIGHT": "4", "VF_TOPIC_PREFIX": "staging.",
                           "VF_S3_SECRET_KEY": "hunter2"})
    assert s.worker.max_inflight == 4
    assert s.kafka.topic_prefix == "staging."
    assert s.store.secret_key.reveal() == "hunter2"


def test_the_topic_prefix_also_prefixes_consumer_groups_that_are_not_set() -> None:
    s = Settings.from_env({"VF_TOPIC_PREFIX": "staging."})
    assert (s.worker.group_id, s.gateway.group_id) == ("staging.vf-synth", "staging.vf-gateway")
    # A group that is set is used as given, even when it equals the default.
    s = Settings.from_env({"VF_TOPIC_PREFIX": "staging.", "VF_GROUP_ID": "vf-synth",
                           "VF_GATEWAY_GROUP_ID": "gw"})
    assert (s.worker.group_id, s.gateway.group_id) == ("vf-synth", "gw")
    # A child process started with to_env() reads back the same groups, not a double prefix.
    s = Settings.from_env({"VF_TOPIC_PREFIX": "staging."})
    assert Settings.from_env(s.to_env()) == s


def test_secrets_never_print() -> None:
    s = Settings.from_env({"VF_S3_SECRET_KEY": "hunter2", "VF_KAFKA_SASL_PASSWORD": "pw"})
    assert "hunter2" not in repr(s) and "pw'" not in repr(s)
    assert "hunter2" not in str(s.store) and "pw'" not in repr(s.kafka)
    assert str(Secret("x")) == "Secret('********')"


def test_bad_integer_names_the_variable() -> None:
    with pytest.raises(ValueError, match="VF_MAX_INFLIGHT must be an integer"):
        Settings.from_env({"VF_MAX_INFLIGHT": "lots"})


def test_bad_values_name_the_variable_and_the_value() -> None:
    with pytest.raises(ValueError, match=r"VF_LOUDNESS_LUFS must be a number, got 'loud'"):
        Settings.from_env({"VF_LOUDNESS_LUFS": "loud"})
    with pytest.raises(ValueError, match=r"VF_EMPTY_CACHE must be one of .*, got 'maybe'"):
        Settings.from_env({"VF_EMPTY_CACHE": "maybe"})


@pytest.mark.parametrize(("raw", "value"), [
    ("1", True), ("true", True), ("YES", True), ("on", True), (" True ", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False)])
def test_bool_settings_take_the_usual_words(raw: str, value: bool) -> None:
    assert Settings.from_env({"VF_EMPTY_CACHE": raw}).engine.empty_cache is value


def test_every_variable_name_is_declared_once_and_kept() -> None:
    """DESIGN.md's and the manifests' names: VF_ + today's flat name, plus VF_EMPTY_CACHE."""
    env = Settings().to_env()
    assert len(env) == sum(len(fields(getattr(Settings(), g.name))) for g in fields(Settings))
    assert {"VF_KAFKA_BOOTSTRAP", "VF_KAFKA_SECURITY_PROTOCOL", "VF_KAFKA_SASL_MECHANISM",
            "VF_KAFKA_SASL_USERNAME", "VF_KAFKA_SASL_PASSWORD", "VF_KAFKA_SSL_CAFILE",
            "VF_TOPIC_PREFIX",
            "VF_S3_ENDPOINT", "VF_S3_ACCESS_KEY", "VF_S3_SECRET_KEY", "VF_S3_BUCKET",
            "VF_S3_REGION", "VF_PRESIGN_SECONDS", "VF_ENGINE", "VF_DEVICE", "VF_PRECISION",
            "VF_EMPTY_CACHE", "VF_COSYVOICE_MODEL_DIR", "VF_COSYVOICE_SOURCE",
            "VF_MAX_INFLIGHT", "VF_MAX_BATCH",
            "VF_BATCH_WAIT_MS", "VF_QUEUE_CAPACITY", "VF_MAX_ATTEMPTS",
            "VF_STORAGE_RETRY_SECONDS", "VF_RETRY_MAX_DELAY_S", "VF_DRAIN_SECONDS",
            "VF_REVOKE_GRACE_SECONDS", "VF_STUCK_PARTITION_SECONDS", "VF_SESSION_TIMEOUT_MS",
            "VF_ASSIGNOR", "VF_GROUP_ID",
            "VF_INSTANCE_ID", "VF_METRICS_HOST", "VF_METRICS_PORT", "VF_PROFILE_CACHE_ENTRIES",
            "VF_PROFILE_CACHE_MB", "VF_VOICE_TTL_SECONDS", "VF_LOUDNESS_LUFS",
            "VF_QUALITY_CHECKS", "VF_BATCH_MIN_SHARE", "VF_INTERACTIVE_SLOTS",
            "VF_INTERACTIVE_DEADLINE_S",
            "VF_CANCEL_TTL_S", "VF_CANCEL_MAX_ENTRIES", "VF_JOB_GAP_MS",
            "VF_JOB_TIMEOUT_SECONDS", "VF_AGGREGATOR_PORT",
            "VF_AGGREGATOR_DATADIR", "VF_AGGREGATOR_REPLICATION_FACTOR", "VF_USAGE_PUBLISH_S",
            "VF_GATEWAY_HOST", "VF_GATEWAY_PORT", "VF_GATEWAY_OPS_PORT", "VF_GATEWAY_KEYS_FILE",
            "VF_GATEWAY_KEYS_RELOAD_S",
            "VF_GATEWAY_MAX_BODY_BYTES", "VF_GATEWAY_MAX_UPLOAD_BYTES", "VF_GATEWAY_DEFAULT_RATE",
            "VF_GATEWAY_DEFAULT_STREAMS", "VF_GATEWAY_LAG_THRESHOLD", "VF_GATEWAY_LAG_INTERVAL_S",
            "VF_GATEWAY_TIMEOUT_S", "VF_GATEWAY_GROUP_ID", "VF_GATEWAY_PRESIGN_SECONDS",
            "VF_GATEWAY_USAGE_CACHE_S", "VF_CONSENT_THRESHOLD",
            "VF_ROUTING", "VF_FLEET_INTERVAL_MS",
            "VF_ROUTE_BALANCE", "VF_ROUTE_JOB_BALANCE", "VF_ROUTE_HOME_QUEUE",
            "VF_ROUTE_COPY_SHARE", "VF_ROUTE_FAILOVER_MS", "VF_ROUTE_SPILL_QUEUE"} == set(env)


def test_to_env_round_trips_and_reveals_secrets_only_there() -> None:
    s = Settings.from_env({"VF_S3_SECRET_KEY": "hunter2", "VF_KAFKA_SASL_PASSWORD": "pw",
                           "VF_EMPTY_CACHE": "yes", "VF_LOUDNESS_LUFS": "-14.5",
                           "VF_MAX_BATCH": "16", "VF_INSTANCE_ID": "w7",
                           "VF_AGGREGATOR_DATADIR": "/var/lib/agg"})
    env = s.to_env()
    assert env["VF_S3_SECRET_KEY"] == "hunter2" and env["VF_KAFKA_SASL_PASSWORD"] == "pw"
    assert (env["VF_EMPTY_CACHE"], env["VF_MAX_BATCH"]) == ("true", "16")
    assert Settings.from_env(env) == s
    assert Settings.from_env(Settings().to_env()) == Settings()


def test_overrides_by_group_skip_flags_that_were_not_given() -> None:
    s = Settings().with_overrides(worker={"max_batch": 4, "instance_id": None},
                                  kafka={"bootstrap": None}, engine={"name": "bench"})
    assert s.worker.max_batch == 4 and s.engine.name == "bench"
    assert s.worker.instance_id == Settings().worker.instance_id
    assert s.kafka == Settings().kafka
    with pytest.raises(TypeError):
        Settings().with_overrides(worker={"no_such_field": 1})


def test_engines_get_their_options_not_the_settings() -> None:
    s = Settings.from_env({"VF_DEVICE": "cuda:1", "VF_PRECISION": "bf16", "VF_EMPTY_CACHE": "1",
                           "VF_COSYVOICE_MODEL_DIR": "/models/cv3",
                           "VF_COSYVOICE_SOURCE": "/opt/CosyVoice"})
    assert s.engine.options() == EngineOptions(device="cuda:1", precision="bf16",
                                               empty_cache=True, cosyvoice_model_dir="/models/cv3",
                                               cosyvoice_source="/opt/CosyVoice")


# -- the state dir ---------------------------------------------------------------------------

def _checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text('[build-system]\nrequires = []\n\n'
                                         '[project]\nname = "voicefactory"\nversion = "0"\n')
    return root


def test_vf_state_dir_wins_everywhere(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "repo")
    assert state_dir({"VF_STATE_DIR": str(tmp_path / "s")}, repo) == tmp_path / "s"


def test_inside_a_checkout_state_is_its_dot_vf(tmp_path: Path) -> None:
    repo = _checkout(tmp_path / "repo")
    (repo / "docs" / "img").mkdir(parents=True)
    assert state_dir({}, repo) == repo / ".vf"
    assert state_dir({"XDG_STATE_HOME": str(tmp_path / "x")}, repo / "docs" / "img") == \
        repo / ".vf"
    assert find_checkout(repo / "docs") == repo


def test_another_projects_pyproject_is_not_a_checkout(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "voicefactory-plugin"\n'
                                          '[tool.x]\nname = "voicefactory"\n')
    assert find_checkout(other) is None


def test_outside_a_checkout_state_is_per_user(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert state_dir({"XDG_STATE_HOME": str(tmp_path / "xdg")}, elsewhere) == \
        tmp_path / "xdg" / "voicefactory"
    assert state_dir({"HOME": str(tmp_path / "home")}, elsewhere) == \
        tmp_path / "home" / ".local" / "state" / "voicefactory"


def test_this_checkout_is_found_from_inside_it() -> None:
    here = Path(__file__).resolve()
    assert find_checkout(here.parent) == here.parents[3]


# -- ranges ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "message"), [
    ({"VF_MAX_INFLIGHT": "0"}, "VF_MAX_INFLIGHT must be >= 1 (got 0)"),
    ({"VF_MAX_BATCH": "-3"}, "VF_MAX_BATCH must be >= 1 (got -3)"),
    ({"VF_INTERACTIVE_SLOTS": "-1"}, "VF_INTERACTIVE_SLOTS must be >= 0 (got -1)"),
    ({"VF_QUEUE_CAPACITY": "0"}, "VF_QUEUE_CAPACITY must be >= 1 (got 0)"),
    ({"VF_DRAIN_SECONDS": "0"}, "VF_DRAIN_SECONDS must be >= 1 (got 0)"),
    ({"VF_STUCK_PARTITION_SECONDS": "0"}, "VF_STUCK_PARTITION_SECONDS must be >= 1 (got 0)"),
    ({"VF_BATCH_MIN_SHARE": "1.5"}, "VF_BATCH_MIN_SHARE must be between 0 and 1 (got 1.5)"),
    ({"VF_METRICS_PORT": "70000"},
     "VF_METRICS_PORT must be between -1 and 65535 (got 70000; -1 disables, 0 takes a free "
     "port)"),
    ({"VF_GATEWAY_PORT": "-1"}, "VF_GATEWAY_PORT must be between 0 and 65535 (got -1)"),
    ({"VF_GATEWAY_TIMEOUT_S": "0"}, "VF_GATEWAY_TIMEOUT_S must be > 0 (got 0.0)"),
    ({"VF_GATEWAY_LAG_INTERVAL_S": "inf"}, "VF_GATEWAY_LAG_INTERVAL_S must be a finite "
                                           "number (got inf)"),
    ({"VF_LOUDNESS_LUFS": "nan"}, "VF_LOUDNESS_LUFS must be a finite number (got nan)"),
    ({"VF_JOB_TIMEOUT_SECONDS": "0"}, "VF_JOB_TIMEOUT_SECONDS must be >= 1 (got 0)"),
    ({"VF_PRESIGN_SECONDS": "604801"}, "VF_PRESIGN_SECONDS must be between 1 and 604800 "
                                       "(got 604801; S3 presigned URLs last at most 7 days)"),
    ({"VF_ROUTE_BALANCE": "0.9"}, "VF_ROUTE_BALANCE must be >= 1 (got 0.9)"),
    ({"VF_ROUTING": "random"}, "VF_ROUTING must be one of fleet, voice (got 'random')"),
    ({"VF_QUALITY_CHECKS": "yes"}, "VF_QUALITY_CHECKS must be one of on, off (got 'yes')"),
])
def test_a_value_out_of_range_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        Settings.from_env(env)
    assert str(info.value) == message


def test_the_edges_of_each_range_are_accepted() -> None:
    s = Settings.from_env({"VF_MAX_INFLIGHT": "1", "VF_INTERACTIVE_SLOTS": "0",
                           "VF_METRICS_PORT": "-1", "VF_GATEWAY_PORT": "0",
                           "VF_BATCH_MIN_SHARE": "0", "VF_BATCH_WAIT_MS": "0",
                           "VF_REVOKE_GRACE_SECONDS": "0", "VF_ROUTE_FAILOVER_MS": "0",
                           "VF_AGGREGATOR_PORT": "-1", "VF_PRESIGN_SECONDS": "604800",
                           "VF_STUCK_PARTITION_SECONDS": "1"})
    assert (s.worker.max_inflight, s.worker.interactive_slots, s.gateway.port) == (1, 0, 0)
    assert s.worker.stuck_partition_seconds == 1


def test_flags_and_code_are_checked_as_the_environment_is() -> None:
    with pytest.raises(ValueError, match=r"^VF_MAX_INFLIGHT must be >= 1 \(got 0\)$"):
        Settings().with_overrides(worker={"max_inflight": 0})  # `--max-inflight 0`
    with pytest.raises(ValueError, match=r"^VF_MAX_BATCH must be >= 1 \(got 0\)$"):
        WorkerSettings(max_batch=0)


def test_every_numeric_setting_names_its_range() -> None:
    """A new int or float field must say which values make sense (var(..., ge=...))."""
    unbounded = [f.metadata["env"] for g in fields(Settings) for f in fields(_group(g.name))
                 if f.type in ("int", "float") and f.metadata.get("bounds") is None]
    assert unbounded == []


def _group(name: str) -> Any:
    return getattr(Settings(), name)


def test_a_bad_setting_exits_1_with_one_line_naming_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import voicefactory
    from consumers import logs

    monkeypatch.setattr(logs, "configure", lambda *_: None)  # keep pytest's log handlers
    monkeypatch.setenv("VF_MAX_INFLIGHT", "0")
    assert voicefactory.main(["worker", "--engine", "bench"]) == 1
    assert capsys.readouterr().err == "error: VF_MAX_INFLIGHT must be >= 1 (got 0)\n"
    monkeypatch.delenv("VF_MAX_INFLIGHT")
    assert voicefactory.main(["worker", "--max-batch", "0"]) == 1
    assert capsys.readouterr().err == "error: VF_MAX_BATCH must be >= 1 (got 0)\n"
    monkeypatch.setenv("VF_GATEWAY_TIMEOUT_S", "-5")
    assert voicefactory.main(["gateway"]) == 1
    assert capsys.readouterr().err == "error: VF_GATEWAY_TIMEOUT_S must be > 0 (got -5.0)\n"
