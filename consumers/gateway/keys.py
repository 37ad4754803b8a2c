"""API keys of the gateway: a file of hashes, each mapped to a tenant and its limits.

`voicefactory gateway keys add TENANT` -> `new_key()` (32 random bytes, URL-safe) -> its
SHA-256 and the tenant's limits appended to the keys file as one JSON line -> the key is
printed once and never stored. A request's `Authorization: Bearer KEY` -> `KeyRing.lookup`
-> SHA-256 of KEY -> the tenant, or None.

Why SHA-256 and not scrypt/PBKDF2: slow, salted hashes exist to protect low-entropy
passwords from offline guessing. These keys are 256-bit random strings, so guessing one
from its hash is as hard as guessing the key itself, salt or not; a fast unsalted hash also
lets every request find its tenant with one dictionary lookup instead of running a KDF
(tens of milliseconds by design) against every stored entry on the request path.

The file (a Kubernetes Secret mounted read-only in the cluster) is re-read when its
modification time changes, checked at most every `reload_s`, so keys added or revoked
reach running replicas without a restart.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from topics.validation import check_id

log = logging.getLogger(__name__)

KEY_PREFIX = "vf-"


@dataclass(frozen=True)
class Tenant:
    name: str
    rate: float  # requests a second (token bucket refill; burst = max(1, rate))
    streams: int  # speech requests open at once, per replica
    # audio seconds a UTC month; None: no quota (docs/usage.md)
    monthly_audio_s: float | None = None


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def add_key(path: Path, tenant: str, *, rate: float, streams: int,
            monthly_audio_s: float | None = None) -> str:
    """Append a new key's hash for `tenant`; returns the key (shown once, stored nowhere)."""
    check_id("tenant", tenant, 64)
    if rate <= 0 or streams < 1:
        raise ValueError(f"rate must be > 0 and streams >= 1, got rate={rate} streams={streams}")
    _check_quota(monthly_audio_s)
    key = new_key()
    entry: dict[str, object] = {"sha256": key_hash(key), "tenant": tenant, "rate": rate,
                                "streams": streams,
                                "created_at": datetime.now(UTC).isoformat(timespec="seconds")}
    if monthly_audio_s is not None:
        entry["monthly_audio_s"] = monthly_audio_s
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0600: the hashes are not secrets, but who may call as which tenant is nobody else's.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "ab") as out:
        out.write(orjson.dumps(entry) + b"\n")
    return key


def parse_keys(text: str, source: str = "keys file") -> dict[str, Tenant]:
    """`{sha256: Tenant}` from the file's JSON lines; a bad line raises with its number."""
    found: dict[str, Tenant] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = orjson.loads(line)
            digest, tenant = str(entry["sha256"]).lower(), str(entry["tenant"])
            rate, streams = float(entry["rate"]), int(entry["streams"])
            quota = entry.get("monthly_audio_s")
            quota = _check_quota(float(quota)) if quota is not None else None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}:{lineno}: not a key entry ({type(exc).__name__})") \
                from None
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"{source}:{lineno}: sha256 is not 64 hex digits")
        found[digest] = Tenant(tenant, rate, streams, monthly_audio_s=quota)
    return found


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
        self._mtime: float | None = None
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
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            if self.loaded or force:
                log.warning("gateway keys file %s does not exist: every request is refused",
                            self.path)
            self._tenants, self._mtime, self.loaded = {}, None, False
            return
        if mtime == self._mtime:
            return
        try:
            self._tenants = parse_keys(self.path.read_text(encoding="utf-8"), str(self.path))
        except (OSError, ValueError) as exc:
            # Keep the last good set: a half-written Secret update must not lock everyone out.
            log.error("gateway keys file not reloaded: %s", exc)
            return
        self._mtime, self.loaded = mtime, True
        log.info("gateway keys loaded: %d key(s) from %s", len(self._tenants), self.path)

    def lookup(self, key: str) -> Tenant | None:
        self.refresh()
        return self._tenants.get(key_hash(key)) if key else None


def bearer(header: str | None) -> str:
    """The key of an `Authorization: Bearer KEY` header, or "" (never logged)."""
    if not header:
        return ""
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""
