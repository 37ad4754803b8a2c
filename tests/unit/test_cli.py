"""The command line's exit codes and messages as a user sees them (no servers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import voicefactory


def _tone(path: Path, seconds: float, rate: int = 22050) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), rate)
    return path


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        voicefactory.main(["nosuch"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_voices_check_names_the_broken_rule_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(["voices", "check", str(_tone(tmp_path / "short.wav", 1.0))]) == 1
    captured = capsys.readouterr()
    assert "speech duration  FAIL  1.00 s after trimming silence" in captured.out
    assert "verdict: rejected" in captured.out
    assert "FAIL: reference too short: 1.0 s of speech, need >= 3.0 s" in captured.err
    assert voicefactory.main(["voices", "check", str(_tone(tmp_path / "ok.wav", 4.0))]) == 0


def test_dev_env_prints_exports(capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(["dev", "env"]) == 0
    assert "export VF_KAFKA_BOOTSTRAP=127.0.0.1:9092" in capsys.readouterr().out


def test_dev_kafka_tmpfs_is_refused_for_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(["dev", "up", "--cluster", "--kafka-tmpfs"]) == 2
    assert "--kafka-tmpfs is for the one-node stack" in capsys.readouterr().err


def test_a_bad_setting_names_the_variable_and_the_value_and_exits_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VF_EMPTY_CACHE", "sometimes")
    assert voicefactory.main(["submit", "nonexistent.jsonl"]) == 1
    assert "error: VF_EMPTY_CACHE must be one of 1/0, true/false, yes/no, on/off, got " \
           "'sometimes'" in capsys.readouterr().err


def test_flags_override_the_environment_group_by_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_MAX_BATCH", "4")
    monkeypatch.setenv("VF_KAFKA_BOOTSTRAP", "kafka:9092")
    args = voicefactory.build_parser().parse_args(
        ["worker", "--bootstrap", "b:1", "--engine", "bench", "--max-inflight", "3",
         "--instance-id", "w9", "--metrics-port", "-1", "--bucket", "clips",
         "--stuck-partition-seconds", "45"])
    s = voicefactory._settings(args)
    assert (s.kafka.bootstrap, s.engine.name, s.store.bucket) == ("b:1", "bench", "clips")
    assert (s.worker.max_inflight, s.worker.max_batch, s.worker.instance_id,
            s.worker.metrics_port, s.worker.stuck_partition_seconds) == (3, 4, "w9", -1, 45)


def test_the_topic_prefix_flag_also_prefixes_the_worker_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VF_GROUP_ID", raising=False)
    monkeypatch.delenv("VF_TOPIC_PREFIX", raising=False)
    args = voicefactory.build_parser().parse_args(["worker", "--topic-prefix", "qa."])
    assert voicefactory._settings(args).worker.group_id == "qa.vf-synth"
    monkeypatch.setenv("VF_GROUP_ID", "fleet-a")
    assert voicefactory._settings(args).worker.group_id == "fleet-a"


def test_cancel_needs_exactly_one_usable_target_and_exits_2_otherwise(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        voicefactory.main(["cancel"])
    assert info.value.code == 2
    assert "one of the arguments --request --job is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        voicefactory.main(["cancel", "--request", "r-1", "--job", "j-1"])
    assert info.value.code == 2
    assert voicefactory.main(["cancel", "--job", "../etc"]) == 2
    assert "error: job_id '../etc'" in capsys.readouterr().err


def test_say_and_submit_take_the_interactive_lane_flag() -> None:
    parser = voicefactory.build_parser()
    assert parser.parse_args(["say", "hi", "--voice", "v", "--interactive"]).interactive
    assert not parser.parse_args(["submit", "f.jsonl"]).interactive
    assert parser.parse_args(["submit", "f.jsonl", "--interactive"]).interactive
