"""API keys of the gateway: a file of hashes, each mapped to a tenant, its limits and scopes.

`voicefactory gateway keys add TENANT --scopes speech,jobs` -> `new_key()` (32 random bytes,
URL-safe) -> its SHA-256, the tenant's limits and the key's scopes appended to the keys file
as one JSON line -> the key is printed once and never stored. A request's `Authorization:
Bearer KEY` -> `KeyRing.lookup` -> SHA-256 of KEY -> the `Tenant` (name, limits, scopes, key
id), or None. `keys revoke KEY_ID` rewrites the key's line with `revoked_at` (the line stays
for `keys list` and the record); a revoked key is refused like an unknown one.

A key's id is the first 12 hex digits of its hash: enough to name it in `keys list`, the
audit topic and logs, and worthless to an attacker (it is a prefix of a hash of 256 random
bits). Neither the key nor its full hash is ever printed or logged.

Scopes (`SCOPES`; which route needs which: consumers.gateway.scopes): a line without a
`scopes` field (written before scopes existed) gets `LEGACY_SCOPES` = the default scopes
(speech, voices:write, jobs): everything such a key did keeps working except the operator
views (`admin`), which show every tenant's activity and so need a key made for them.

Why SHA-256 and not scrypt/PBKDF2: slow, salted hashes exist to protect low-entropy
passwords from offline guessing. These keys are 256-bit random strings, so guessing one
from its hash is as hard as guessing the key itself, salt or not; a fast unsalted hash also
lets every request find its tenant with one dictionary lookup instead of running a KDF
(tens of milliseconds by design) against every stored entry on the request path.

The file (a Kubernetes Secret mounted read-only in the cluster) is re-read when it changes
(modification time, size or inode), checked at most every `reload_s`, so keys added or
revoked reach running replicas without a restart: a revoked key fails within `reload_s`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from topics.validation import check_id

log = logging.getLogger(__name__)

KEY_PREFIX = "vf-"
KEY_ID_LEN = 12  # hex digits of the hash that name a key
SCOPES = ("speech", "voices:write", "jobs", "admin")
DEFAULT_SCOPES = frozenset({"speech", "voices:write", "jobs"})
LEGACY_SCOPES = DEFAULT_SCOPES  # a line without `scopes`: see the module docstring


@dataclass(frozen=True)
class Tenant:
    """Who a key speaks for and what it may do: a tenant's name and limits, the key's scopes
    and id (the first 12 hex digits of its hash)."""

    name: str
    rate: float  # requests a second (token bucket refill; burst = max(1, rate))
    streams: int  # speech requests open at once, per replica
    scopes: frozenset[str] = DEFAULT_SCOPES
    key_id: str = ""
    # audio seconds a UTC month; None: no quota (docs/usage.md)
    monthly_audio_s: float | None = None


@dataclass(frozen=True)
class KeyEntry:
    """One line of the keys file, as `keys list` shows it (never the hash itself)."""

    digest: str
    tenant: Tenant
    created_at: str | None
    revoked_at: str | None
    legacy: bool  # no `scopes` on the line: LEGACY_SCOPES

    @property
    def key_id(self) -> str:
        return self.digest[:KEY_ID_LEN]


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_id(key: str) -> str:
    return key_hash(key)[:KEY_ID_LEN]


def parse_scopes(value: str | Iterable[str]) -> frozenset[str]:
    """`speech,jobs` (or a list) -> the scopes; an unknown or missing one raises ValueError."""
    names = value.split(",") if isinstance(value, str) else list(value)
    scopes = frozenset(n.strip() for n in names if n.strip())
    unknown = sorted(scopes - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r} (known: {', '.join(SCOPES)})")
    if not scopes:
        raise ValueError(f"a key needs at least one scope (known: {', '.join(SCOPES)})")
    return scopes


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time (`keys add` appends, `keys revoke` replaces the file): a lock
    file beside it, since a replaced file's own lock would guard the old inode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def add_key(path: Path, tenant: str, *, rate: float, streams: int,
            scopes: Iterable[str] = DEFAULT_SCOPES,
            monthly_audio_s: float | None = None) -> str:
    """Append a new key's hash for `tenant`; returns the key (shown once, stored nowhere)."""
    check_id("tenant", tenant, 64)
    if rate <= 0 or streams < 1:
        raise ValueError(f"rate must be > 0 and streams >= 1, got rate={rate} streams={streams}")
    granted = parse_scopes(scopes)
    _check_quota(monthly_audio_s)
    key = new_key()
    entry: dict[str, object] = {
        "sha256": key_hash(key), "tenant": tenant, "rate": rate, "streams": streams,
        "scopes": [s for s in SCOPES if s in granted],
        "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    if monthly_audio_s is not None:
        entry["monthly_audio_s"] = monthly_audio_s
    with _locked(path):
        # 0600: the hashes are not secrets, but who may call as which tenant is nobody else's.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as out:
            out.write(orjson.dumps(entry) + b"\n")
    return key


def _entry(line: str, lineno: int, source: str) -> KeyEntry | None:
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    try:
        raw = orjson.loads(line)
        digest, tenant = str(raw["sha256"]).lower(), str(raw["tenant"])
        rate, streams = float(raw["rate"]), int(raw["streams"])
        listed = raw.get("scopes")
        created, revoked = raw.get("created_at"), raw.get("revoked_at")
        quota = raw.get("monthly_audio_s")
        quota = _check_quota(float(quota)) if quota is not None else None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{source}:{lineno}: not a key entry ({type(exc).__name__})") \
            from None
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{source}:{lineno}: sha256 is not 64 hex digits")
    if listed is None:
        scopes = LEGACY_SCOPES
    elif isinstance(listed, list) and all(isinstance(s, str) for s in listed):
        scopes = frozenset(listed)
        unknown = sorted(scopes - set(SCOPES))
        if unknown:
            raise ValueError(f"{source}:{lineno}: unknown scope {unknown[0]!r} "
                             f"(known: {', '.join(SCOPES)})")
    else:
        raise ValueError(f"{source}:{lineno}: scopes is not a list of names")
    return KeyEntry(digest, Tenant(tenant, rate, streams, scopes, digest[:KEY_ID_LEN], quota),
                    str(created) if created is not None else None,
                    str(revoked) if revoked is not None else None, listed is None)


def read_entries(text: str, source: str = "keys file") -> list[KeyEntry]:
    """Every key line of the file, revoked ones included; a bad line raises with its number
    (and never its content, which could be a key pasted by mistake)."""
    found = [_entry(line, n, source) for n, line in enumerate(text.splitlines(), 1)]
    return [e for e in found if e is not None]


def parse_keys(text: str, source: str = "keys file") -> dict[str, Tenant]:
    """`{sha256: Tenant}` of the keys not revoked."""
    return {e.digest: e.tenant for e in read_entries(text, source) if e.revoked_at is None}


def list_keys(path: Path) -> list[KeyEntry]:
    try:
        return read_entries(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        return []


class UnknownKey(LookupError):
    pass


def revoke_key(path: Path, wanted: str) -> tuple[KeyEntry, bool]:
    """Mark the key whose id (or a longer prefix of its hash) is `wanted` revoked: its line
    gets `revoked_at`, the file is replaced atomically (a reader sees the old or the new
    file, never half of one). Returns the entry and whether it was revoked just now (False:
    it already was). UnknownKey when no key or more than one matches."""
    wanted = wanted.strip().lower()
    if len(wanted) < KEY_ID_LEN or any(c not in "0123456789abcdef" for c in wanted):
        raise UnknownKey(f"a key id is {KEY_ID_LEN} or more hex digits (keys list), "
                         f"got {len(wanted)} character(s)")
    with _locked(path):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise UnknownKey(f"no keys file at {path}") from None
        hits = [(i, e) for i, line in enumerate(lines, 1)
                if (e := _entry(line, i, str(path))) is not None
                and e.digest.startswith(wanted)]
        if len(hits) != 1:
            raise UnknownKey(f"no key {wanted} in {path}" if not hits else
                             f"{len(hits)} keys start with {wanted}: give more digits")
        lineno, entry = hits[0]
        if entry.revoked_at is not None:
            return entry, False
        now = datetime.now(UTC).isoformat(timespec="seconds")
        raw: dict[str, Any] = orjson.loads(lines[lineno - 1])
        raw["revoked_at"] = now
        lines[lineno - 1] = orjson.dumps(raw).decode()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    return replace(entry, revoked_at=now), True


def _check_quota(value: float | None) -> float | None:
    if value is not None and not 0 <= value < float("inf"):  # NaN fails too
        raise ValueError(f"monthly audio seconds must be a number >= 0, got {value}")
    return value


class KeyRing:
    """The keys file in memory, re-read when it changes."""

    def __init__(self, path: Path, *, reload_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._reload_s = reload_s
        self._clock = clock
        self._tenants: dict[str, Tenant] = {}
        self._revoked: frozenset[str] = frozenset()
        self._version: tuple[int, int, int] | None = None  # mtime_ns, size, inode
        self._checked = float("-inf")
        self.loaded = False
        self.refresh(force=True)

    def __len__(self) -> int:
        return len(self._tenants)

    def refresh(self, *, force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._checked < self._reload_s:
            return
        self._checked = now
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if self.loaded or force:
                log.warning("gateway keys file %s does not exist: every request is refused",
                            self.path)
            self._tenants, self._revoked, self._version, self.loaded = {}, frozenset(), \
                None, False
            return
        # The size and inode too: `keys revoke` replaces the file, and a rewrite within the
        # file system's timestamp resolution must still be seen.
        version = (st.st_mtime_ns, st.st_size, st.st_ino)
        if version == self._version:
            return
        try:
            entries = read_entries(self.path.read_text(encoding="utf-8"), str(self.path))
        except (OSError, ValueError) as exc:
            # Keep the last good set: a half-written Secret update must not lock everyone out.
            log.error("gateway keys file not reloaded: %s", exc)
            return
        self._tenants = {e.digest: e.tenant for e in entries if e.revoked_at is None}
        self._revoked = frozenset(e.digest for e in entries if e.revoked_at is not None)
        self._version, self.loaded = version, True
        log.info("gateway keys loaded: %d key(s), %d revoked, from %s", len(self._tenants),
                 len(self._revoked), self.path)

    def lookup(self, key: str) -> Tenant | None:
        self.refresh()
        return self._tenants.get(key_hash(key)) if key else None

    def revoked(self, key: str) -> bool:
        """Whether `key` is a revoked one (so the 401 can say so; the holder knows the key)."""
        return bool(key) and key_hash(key) in self._revoked


def bearer(header: str | None) -> str:
    """The key of an `Authorization: Bearer KEY` header, or "" (never logged)."""
    if not header:
        return ""
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""
