"""API keys: shown once, stored as SHA-256 only, looked up by hash, reloaded on change."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from consumers.gateway.keys import KeyRing, Tenant, add_key, bearer, parse_keys


def test_a_new_key_is_stored_only_as_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gateway-keys"
    key = add_key(path, "acme", rate=5, streams=2)
    text = path.read_text()
    assert key.startswith("vf-") and len(key) > 40
    assert key not in text and hashlib.sha256(key.encode()).hexdigest() in text
    assert os.stat(path).st_mode & 0o077 == 0
    ring = KeyRing(path)
    assert ring.lookup(key) == Tenant("acme", 5.0, 2)
    assert ring.lookup(key + "x") is None and ring.lookup("") is None


def test_tenant_names_and_limits_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tenant"):
        add_key(tmp_path / "k", "../evil", rate=1, streams=1)
    with pytest.raises(ValueError, match="rate"):
        add_key(tmp_path / "k", "acme", rate=0, streams=1)


def test_a_bad_line_names_its_number_and_never_its_content() -> None:
    with pytest.raises(ValueError, match=r"keys:2: not a key entry") as caught:
        parse_keys('# comment\n{"sha256": "zz", "tenant": "a"}\n', "keys")
    assert "zz" not in str(caught.value)
    with pytest.raises(ValueError, match="64 hex"):
        parse_keys('{"sha256": "abc", "tenant": "a", "rate": 1, "streams": 1}')


def test_the_ring_reloads_a_changed_file_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "keys"
    first = add_key(path, "acme", rate=1, streams=1)
    ring = KeyRing(path, reload_s=5, clock=lambda: now[0])
    second = add_key(path, "beta", rate=1, streams=1)
    os.utime(path, (1e9, 1e9))  # a new mtime whatever the file system's resolution
    assert ring.lookup(second) is None  # not re-read before reload_s
    now[0] = 6.0
    assert ring.lookup(second) is not None and ring.lookup(first) is not None
    path.write_text("garbage\n")
    os.utime(path, (2e9, 2e9))
    now[0] = 12.0
    assert ring.lookup(first) is not None  # a broken update does not lock everyone out


def test_a_missing_file_refuses_everyone(tmp_path: Path) -> None:
    ring = KeyRing(tmp_path / "none")
    assert not ring.loaded and ring.lookup("vf-anything") is None


def test_bearer_header_parsing() -> None:
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer("Basic abc") == "" and bearer(None) == "" and bearer("Bearer") == ""


def test_a_monthly_audio_quota_is_an_optional_field_of_the_key_line(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    plain = add_key(path, "acme", rate=5, streams=2)
    capped = add_key(path, "acme", rate=5, streams=2, monthly_audio_s=3600)
    lines = path.read_text().splitlines()
    assert "monthly_audio_s" not in lines[0] and '"monthly_audio_s":3600' in lines[1]
    ring = KeyRing(path)
    assert ring.lookup(plain) == Tenant("acme", 5.0, 2)  # written before quotas: none
    assert ring.lookup(capped) == Tenant("acme", 5.0, 2, monthly_audio_s=3600.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="monthly audio seconds"):
            add_key(path, "acme", rate=5, streams=2, monthly_audio_s=bad)
    with pytest.raises(ValueError, match="keys:1: not a key entry"):
        parse_keys('{"sha256": "' + "a" * 64 + '", "tenant": "a", "rate": 1, "streams": 1, '
                   '"monthly_audio_s": "lots"}', "keys")
