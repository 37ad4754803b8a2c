"""`voicefactory gateway keys add|list|revoke` and the gateway's flags.

Kafka is unreachable here on purpose (a closed port): the key commands' audit events are
then not written, which the commands must survive and say; tests/integration/
test_scopes_audit.py reads the events back from the real broker."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import voicefactory
from consumers.gateway.cli import settings_from
from consumers.gateway.keys import KeyRing, key_id, list_keys


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VF_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing listens on port 1


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


def test_keys_add_takes_scopes_and_refuses_an_unknown_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    assert voicefactory.main(["gateway", "--keys-file", str(path), "keys", "add", "acme",
                              "--scopes", "speech,jobs", "--no-audit"]) == 0
    tenant = KeyRing(path).lookup(capsys.readouterr().out.strip())
    assert tenant is not None and tenant.scopes == {"speech", "jobs"}
    assert voicefactory.main(["gateway", "--keys-file", str(path), "keys", "add", "acme",
                              "--scopes", "speech,root", "--no-audit"]) == 2
    assert "unknown scope 'root'" in capsys.readouterr().err
    assert len(list_keys(path)) == 1


def test_keys_list_shows_ids_and_scopes_never_keys_or_hashes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    base = ["gateway", "--keys-file", str(path), "keys"]
    voicefactory.main([*base, "add", "acme", "--scopes", "admin", "--no-audit"])
    key = capsys.readouterr().out.strip()
    voicefactory.main([*base, "add", "rival", "--no-audit"])
    capsys.readouterr()
    assert voicefactory.main([*base, "revoke", key_id(key), "--no-audit"]) == 0
    capsys.readouterr()
    assert voicefactory.main([*base, "list"]) == 0
    listed = capsys.readouterr().out
    assert "rival" in listed and "speech,voices:write,jobs" in listed
    assert key_id(key) not in listed  # revoked: only with --all
    assert voicefactory.main([*base, "list", "--all"]) == 0
    everything = capsys.readouterr().out
    row = next(line for line in everything.splitlines() if line.startswith(key_id(key)))
    assert "acme" in row and "admin" in row and not row.rstrip().endswith(" -")  # revoked
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert key not in everything and digest not in everything and digest[:13] not in everything


def test_keys_revoke_names_an_unknown_key(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    voicefactory.main(["gateway", "--keys-file", str(path), "keys", "add", "acme",
                       "--no-audit"])
    capsys.readouterr()
    code = voicefactory.main(["gateway", "--keys-file", str(path), "keys", "revoke",
                              "0" * 12, "--no-audit"])
    assert code == 1 and "no key 000000000000" in capsys.readouterr().err


def test_a_key_change_stands_when_its_audit_event_cannot_be_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    base = ["gateway", "--keys-file", str(path), "keys"]
    assert voicefactory.main([*base, "add", "acme", "--audit-timeout", "5"]) == 0
    out, err = capsys.readouterr()
    key = out.strip()
    assert "warning: the key.add audit event was not written" in err
    assert f'"action":"key.add","object":"{key_id(key)}"' in err and key not in err
    assert voicefactory.main([*base, "revoke", key_id(key), "--audit-timeout", "5"]) == 0
    assert "warning: the key.revoke audit event was not written" in capsys.readouterr().err
    assert KeyRing(path).lookup(key) is None


def test_keys_add_stores_a_monthly_audio_quota(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys"
    assert voicefactory.main(["gateway", "--keys-file", str(path), "keys", "add", "acme",
                              "--monthly-audio-s", "36000", "--no-audit"]) == 0
    out, err = capsys.readouterr()
    tenant = KeyRing(path).lookup(out.strip())
    assert tenant is not None and tenant.monthly_audio_s == 36000.0
    assert "36000 audio s a month" in err
