"""`voicefactory gateway keys add` and the gateway's flags."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import voicefactory
from consumers.gateway.cli import settings_from
from consumers.gateway.keys import KeyRing


def test_keys_add_prints_the_key_once_and_stores_its_hash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    code = voicefactory.main(["gateway", "--keys-file", str(path), "keys", "add", "acme",
                              "--rate", "3", "--streams", "2"])
    out, err = capsys.readouterr()
    key = out.strip()
    assert code == 0 and key.startswith("vf-") and key not in err and str(path) in err
    assert hashlib.sha256(key.encode()).hexdigest() in path.read_text()
    tenant = KeyRing(path).lookup(key)
    assert tenant is not None and (tenant.name, tenant.rate, tenant.streams) == ("acme", 3, 2)


def test_keys_add_uses_the_default_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VF_GATEWAY_KEYS_FILE", str(tmp_path / "k"))
    monkeypatch.setenv("VF_GATEWAY_DEFAULT_STREAMS", "7")
    assert voicefactory.main(["gateway", "keys", "add", "beta"]) == 0
    tenant = KeyRing(tmp_path / "k").lookup(capsys.readouterr().out.strip())
    assert tenant is not None and (tenant.rate, tenant.streams) == (10.0, 7)


def test_a_path_like_tenant_is_refused(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = voicefactory.main(["gateway", "--keys-file", str(tmp_path / "k"), "keys", "add",
                              "../x"])
    assert code == 1 and "tenant" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()


def test_flags_override_the_gateway_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_GATEWAY_PORT", "9000")
    args = voicefactory.build_parser().parse_args(["gateway", "--port", "8181",
                                                   "--topic-prefix", "t."])
    settings = settings_from(args)
    assert (settings.gateway.port, settings.kafka.topic_prefix) == (8181, "t.")
    assert settings_from(voicefactory.build_parser().parse_args(["gateway"])).gateway.port \
        == 9000


def test_keys_add_stores_a_monthly_audio_quota(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    assert voicefactory.main(["gateway", "--keys-file", str(path), "keys", "add", "acme",
                              "--monthly-audio-s", "36000"]) == 0
    out, err = capsys.readouterr()
    tenant = KeyRing(path).lookup(out.strip())
    assert tenant is not None and tenant.monthly_audio_s == 36000.0
    assert "36000 audio s a month" in err
