"""API keys: shown once, stored as SHA-256 only, looked up by hash, reloaded on change;
scoped, listed without their hashes, revoked within the reload interval."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from consumers.gateway.keys import (
    DEFAULT_SCOPES,
    LEGACY_SCOPES,
    KeyRing,
    Tenant,
    UnknownKey,
    add_key,
    bearer,
    key_id,
    list_keys,
    parse_keys,
    parse_scopes,
    revoke_key,
)


def test_a_new_key_is_stored_only_as_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gateway-keys"
    key = add_key(path, "acme", rate=5, streams=2)
    text = path.read_text()
    assert key.startswith("vf-") and len(key) > 40
    assert key not in text and hashlib.sha256(key.encode()).hexdigest() in text
    assert os.stat(path).st_mode & 0o077 == 0
    ring = KeyRing(path)
    assert ring.lookup(key) == Tenant("acme", 5.0, 2, DEFAULT_SCOPES, key_id(key))
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


def test_a_key_carries_the_scopes_it_was_given(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    narrow = add_key(path, "acme", rate=1, streams=1, scopes=["speech"])
    ops = add_key(path, "ops", rate=1, streams=1, scopes=parse_scopes("admin, jobs"))
    ring = KeyRing(path)
    narrow_tenant, ops_tenant = ring.lookup(narrow), ring.lookup(ops)
    assert narrow_tenant is not None and narrow_tenant.scopes == {"speech"}
    assert ops_tenant is not None and ops_tenant.scopes == {"admin", "jobs"}
    assert "admin" not in DEFAULT_SCOPES  # an operator's view is never a default


def test_unknown_or_no_scopes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scope 'voice:write'"):
        add_key(tmp_path / "k", "acme", rate=1, streams=1, scopes=["voice:write"])
    with pytest.raises(ValueError, match="at least one scope"):
        parse_scopes(" , ")
    line = '{"sha256": "%s", "tenant": "a", "rate": 1, "streams": 1, "scopes": ["root"]}'
    with pytest.raises(ValueError, match=r"keys:1: unknown scope 'root'"):
        parse_keys(line % ("a" * 64), "keys")


def test_a_line_from_before_scopes_gets_the_legacy_scopes() -> None:
    digest = hashlib.sha256(b"vf-old").hexdigest()
    found = parse_keys(f'{{"sha256": "{digest}", "tenant": "acme", "rate": 2, "streams": 1}}')
    assert found[digest].scopes == LEGACY_SCOPES == {"speech", "voices:write", "jobs"}
    assert found[digest].key_id == digest[:12]


def test_list_shows_ids_and_never_the_hash(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    key = add_key(path, "acme", rate=1, streams=1, scopes=["jobs"])
    [entry] = list_keys(path)
    assert entry.key_id == key_id(key) and len(entry.key_id) == 12
    assert entry.tenant.name == "acme" and entry.tenant.scopes == {"jobs"}
    assert entry.created_at and entry.revoked_at is None and not entry.legacy
    assert list_keys(tmp_path / "none") == []


def test_a_revoked_key_fails_within_the_reload_interval(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "keys"
    doomed = add_key(path, "acme", rate=1, streams=1)
    kept = add_key(path, "acme", rate=1, streams=1)
    path.write_text("# operators' note\n" + path.read_text())  # comments survive a revoke
    ring = KeyRing(path, reload_s=5, clock=lambda: now[0])
    assert ring.lookup(doomed) is not None
    entry, now_revoked = revoke_key(path, key_id(doomed))
    assert now_revoked and entry.revoked_at is not None
    now[0] = 4.9
    assert ring.lookup(doomed) is not None  # not re-read yet: the documented window
    now[0] = 5.0
    assert ring.lookup(doomed) is None and ring.revoked(doomed)
    assert ring.lookup(kept) is not None and not ring.revoked(kept)
    text = path.read_text()
    assert text.startswith("# operators' note\n") and os.stat(path).st_mode & 0o077 == 0
    assert [e.revoked_at is not None for e in list_keys(path)] == [True, False]
    again, now_revoked = revoke_key(path, key_id(doomed))  # idempotent
    assert not now_revoked and again.revoked_at == entry.revoked_at


def test_revoke_names_one_key_or_refuses(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    key = add_key(path, "acme", rate=1, streams=1)
    with pytest.raises(UnknownKey, match="12 or more hex"):
        revoke_key(path, key_id(key)[:6])
    with pytest.raises(UnknownKey, match="12 or more hex"):
        revoke_key(path, key)  # the key itself is not its id, and is not echoed back
    with pytest.raises(UnknownKey, match="no key 000000000000"):
        revoke_key(path, "0" * 12)
    with pytest.raises(UnknownKey, match="no keys file"):
        revoke_key(tmp_path / "none", "0" * 12)
    assert KeyRing(path).lookup(key) is not None


def test_a_monthly_audio_quota_is_an_optional_field_of_the_key_line(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    plain = add_key(path, "acme", rate=5, streams=2)
    capped = add_key(path, "acme", rate=5, streams=2, monthly_audio_s=3600)
    lines = path.read_text().splitlines()
    assert "monthly_audio_s" not in lines[0] and '"monthly_audio_s":3600' in lines[1]
    ring = KeyRing(path)
    found_plain, found_capped = ring.lookup(plain), ring.lookup(capped)
    assert found_plain is not None and found_plain.monthly_audio_s is None  # none by default
    assert found_capped is not None and found_capped.monthly_audio_s == 3600.0
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="monthly audio seconds"):
            add_key(path, "acme", rate=5, streams=2, monthly_audio_s=bad)
    with pytest.raises(ValueError, match="keys:1: not a key entry"):
        parse_keys('{"sha256": "' + "a" * 64 + '", "tenant": "a", "rate": 1, "streams": 1, '
                   '"monthly_audio_s": "lots"}', "keys")
