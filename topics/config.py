"""Runtime settings, read once from `VF_*` environment variables.

`Settings.from_env()` is called by the command-line wiring; every other module receives the
frozen object (or the few fields it needs) as keyword arguments. Secrets are wrapped in
`Secret` so that a settings object can be logged or printed without leaking them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any


class Secret:
    """A string that prints as `********`; `.reveal()` returns the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = ""
    kafka_sasl_username: str = ""
    kafka_sasl_password: Secret = field(default_factory=lambda: Secret(""))
    topic_prefix: str = ""
    s3_endpoint: str = "http://127.0.0.1:9000"
    s3_access_key: str = "voicefactory"
    s3_secret_key: Secret = field(default_factory=lambda: Secret("voicefactory-secret"))
    s3_bucket: str = "voicefactory"
    s3_region: str = "us-east-1"
    engine: str = "espeak"
    device: str = "cpu"
    precision: str = "fp32"
    cosyvoice_model_dir: str = ""  # local CosyVoice 2/3 weights; never downloaded
    max_inflight: int = 2
    max_batch: int = 8
    batch_wait_ms: int = 10
    queue_capacity: int = 64
    max_attempts: int = 3
    storage_retry_seconds: int = 300
    retry_max_delay_s: int = 10
    drain_seconds: int = 30
    revoke_grace_seconds: int = 10
    session_timeout_ms: int = 30_000
    assignor: str = "range"  # measured: docs/benchmarks.md
    metrics_host: str = "0.0.0.0"  # noqa: S104 - probes and Prometheus scrape from outside the pod
    metrics_port: int = 9108
    group_id: str = "vf-synth"
    instance_id: str = field(default_factory=socket.gethostname)
    presign_seconds: int = 7 * 24 * 3600
    job_gap_ms: int = 300  # silence between clips on a job's timeline (scripts may override)
    job_timeout_seconds: int = 600  # a job with no new result for this long closes as partial
    aggregator_port: int = 9109  # /healthz, /readyz, /metrics of the aggregator; -1 disables
    aggregator_datadir: str = ".vf/aggregator"
    aggregator_replication_factor: int = 1  # of its changelog topic; 3 in production
    profile_cache_entries: int = 256  # per worker; sized in docs/benchmarks.md (cache locality)
    profile_cache_mb: int = 512
    voice_ttl_seconds: int = 10  # how long a worker trusts a voice.json it read
    loudness_lufs: float = -16.0  # integrated loudness every output is normalised to
    quality_checks: str = "on"  # on|off: speaker similarity + warnings on each result

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get("VF_" + f.name.upper())
            if raw is None:
                continue
            values[f.name] = _coerce(f.name, f.type, raw)
        return cls(**values)

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def _coerce(name: str, annotation: object, raw: str) -> object:
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"VF_{name.upper()} must be an integer, got {raw!r}") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"VF_{name.upper()} must be a number, got {raw!r}") from None
    if kind == "Secret":
        return Secret(raw)
    return raw
