"""Runtime settings of every process, read once from `VF_*` environment variables.

    environment --Settings.from_env()--> Settings(kafka, store, engine, worker, aggregator,
        gateway)
        --> the CLI applies its flags (with_overrides) --> consumers.wiring builds the process
        --> to_env() hands the same values to child processes (bench, fault tests)

Each group is a small frozen dataclass; each of its fields names its environment variable
explicitly (`var("VF_...", default)`), so a field can be renamed without renaming the
variable DESIGN.md documents. Every numeric field also names its range (`ge=1`, `le=65535`)
and a few string fields their choices; a group checks them whenever it is made, from the
environment, from CLI flags or in code, so a bad value stops the process at start with one
line naming the variable (`VF_MAX_INFLIGHT must be >= 1 (got 0)`), which the CLI prints as
`error: ...` and exits 1. A new group (say `gateway`) is one dataclass and one line in
`Settings`. Secrets are `Secret`: printing or logging a settings object shows `********`;
only `to_env()` and the client constructors reveal them. `state_dir()` says where local state
(the dev stack, benchmark output, the demo's audio, faust's folder) lives.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # imported when called: numpy comes with pipeline/, `dev down` needs none
    from pipeline.engines.options import EngineOptions

_T = TypeVar("_T")


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


def process_name(instance_id: str) -> str:
    """The name a process goes by in `tts.fleet`, results, spilled records, logs and the
    console: VF_INSTANCE_ID, or for a dynamic member (set empty) host, process and a random
    part, since a bench runs several workers in one process."""
    return instance_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Bounds:
    """The values a numeric setting may take: `>= ge` (or `> gt`) and `<= le`, and for a
    float a finite number; `hint` says what a special value means ("-1 disables")."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    hint: str = ""

    def problem(self, value: float) -> str | None:
        """Why `value` is out of range (the words after "VF_X must be"), else None."""
        if isinstance(value, float) and not math.isfinite(value):
            return "a finite number"
        if ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le)):
            return None
        if self.ge is not None and self.le is not None:
            return f"between {_num(self.ge)} and {_num(self.le)}"
        parts = [f"{op} {_num(bound)}" for op, bound in
                 ((">=", self.ge), (">", self.gt), ("<=", self.le)) if bound is not None]
        return " and ".join(parts)


def _num(bound: float) -> str:
    return f"{bound:g}"


def var(env: str, default: Any = MISSING, *, factory: Any = MISSING, ge: float | None = None,
        gt: float | None = None, le: float | None = None, hint: str = "",
        choices: tuple[str, ...] = ()) -> Any:
    """A settings field read from the environment variable `env`; a numeric one names its
    range (`ge`/`gt`/`le`), a string one may name its `choices`. Both are checked whenever a
    settings group is made (`_Checked`), so a bad value fails at start naming `env`."""
    bounds = Bounds(ge, gt, le, hint) if (ge, gt, le) != (None, None, None) else None
    metadata = {"env": env, "bounds": bounds, "choices": choices}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


class _Checked:
    """Base of every settings group: each field's range or choices, checked on construction
    (from the environment, from CLI flags through `with_overrides`, or in code)."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            check_field(f, getattr(self, f.name))


def check_field(f: Field[Any], value: object) -> None:
    """ValueError naming the variable when `value` breaks `f`'s range or choices:
    `VF_MAX_INFLIGHT must be >= 1 (got 0)`."""
    env = f.metadata.get("env", f.name)
    bounds: Bounds | None = f.metadata.get("bounds")
    if bounds is not None and isinstance(value, int | float) and not isinstance(value, bool):
        problem = bounds.problem(value)
        if problem is not None:
            hint = f"; {bounds.hint}" if bounds.hint else ""
            raise ValueError(f"{env} must be {problem} (got {value!r}{hint})")
    choices: tuple[str, ...] = f.metadata.get("choices", ())
    if choices and value not in choices:
        raise ValueError(f"{env} must be one of {', '.join(choices)} (got {value!r})")


@dataclass(frozen=True)
class KafkaSettings(_Checked):
    bootstrap: str = var("VF_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    security_protocol: str = var("VF_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    sasl_mechanism: str = var("VF_KAFKA_SASL_MECHANISM", "")
    sasl_username: str = var("VF_KAFKA_SASL_USERNAME", "")
    sasl_password: Secret = var("VF_KAFKA_SASL_PASSWORD", factory=lambda: Secret(""))  # noqa: RUF009
    # PEM CA bundle the brokers' certificates are checked against (SSL, SASL_SSL); "": the
    # system's trust store
    ssl_cafile: str = var("VF_KAFKA_SSL_CAFILE", "")
    topic_prefix: str = var("VF_TOPIC_PREFIX", "")


@dataclass(frozen=True)
class StoreSettings(_Checked):
    endpoint: str = var("VF_S3_ENDPOINT", "http://127.0.0.1:9000")
    access_key: str = var("VF_S3_ACCESS_KEY", "voicefactory")
    secret_key: Secret = var(  # noqa: RUF009 - var() is dataclasses.field plus the env name
        "VF_S3_SECRET_KEY", factory=lambda: Secret("voicefactory-secret"))
    bucket: str = var("VF_S3_BUCKET", "voicefactory")
    region: str = var("VF_S3_REGION", "us-east-1")
    presign_seconds: int = var("VF_PRESIGN_SECONDS", 7 * 24 * 3600, ge=1, le=7 * 24 * 3600,
                                hint="S3 presigned URLs last at most 7 days")


@dataclass(frozen=True)
class EngineSettings(_Checked):
    name: str = var("VF_ENGINE", "espeak")
    device: str = var("VF_DEVICE", "cpu")
    precision: str = var("VF_PRECISION", "fp32")
    empty_cache: bool = var("VF_EMPTY_CACHE", False)  # torch.cuda.empty_cache() after a batch
    cosyvoice_model_dir: str = var("VF_COSYVOICE_MODEL_DIR", "")  # local weights only
    # upstream's source (a clone, or a folder with CosyVoice/ and Matcha-TTS/); empty: PYTHONPATH
    cosyvoice_source: str = var("VF_COSYVOICE_SOURCE", "")

    def options(self) -> EngineOptions:
        """What the engine itself needs (pipeline/ reads no settings)."""
        from pipeline.engines.options import EngineOptions

        return EngineOptions(device=self.device, precision=self.precision,
                             empty_cache=self.empty_cache,
                             cosyvoice_model_dir=self.cosyvoice_model_dir,
                             cosyvoice_source=self.cosyvoice_source)


@dataclass(frozen=True)
class WorkerSettings(_Checked):
    max_inflight: int = var("VF_MAX_INFLIGHT", 2, ge=1)
    max_batch: int = var("VF_MAX_BATCH", 8, ge=1)
    batch_wait_ms: int = var("VF_BATCH_WAIT_MS", 10, ge=0)
    queue_capacity: int = var("VF_QUEUE_CAPACITY", 64, ge=1)
    max_attempts: int = var("VF_MAX_ATTEMPTS", 3, ge=1)
    storage_retry_seconds: int = var("VF_STORAGE_RETRY_SECONDS", 300, ge=0)
    retry_max_delay_s: int = var("VF_RETRY_MAX_DELAY_S", 10, ge=0)
    drain_seconds: int = var("VF_DRAIN_SECONDS", 30, ge=1)
    revoke_grace_seconds: int = var("VF_REVOKE_GRACE_SECONDS", 10, ge=0)
    # A partition whose committed offset stands still this long while records wait behind it
    # is stuck: vf_partitions_stuck, the VoiceFactoryPartitionStuck alert, /readyz's body
    stuck_partition_seconds: int = var("VF_STUCK_PARTITION_SECONDS", 120, ge=1)
    session_timeout_ms: int = var("VF_SESSION_TIMEOUT_MS", 30_000, ge=1000)
    assignor: str = var("VF_ASSIGNOR", "range")  # measured: docs/benchmarks.md
    group_id: str = var("VF_GROUP_ID", "vf-synth")
    # The process's identity and its /healthz, /readyz, /metrics listener; the aggregator
    # shares these three (it is a differently named member of its own group).
    instance_id: str = var("VF_INSTANCE_ID", factory=socket.gethostname)
    metrics_host: str = var("VF_METRICS_HOST", "0.0.0.0")  # noqa: S104 - scraped from outside
    metrics_port: int = var("VF_METRICS_PORT", 9108, ge=-1, le=65535,
                            hint="-1 disables, 0 takes a free port")
    profile_cache_entries: int = var("VF_PROFILE_CACHE_ENTRIES", 256, ge=1)  # docs/benchmarks.md
    profile_cache_mb: int = var("VF_PROFILE_CACHE_MB", 512, ge=1)
    voice_ttl_seconds: int = var("VF_VOICE_TTL_SECONDS", 10, ge=0)  # trust in a voice.json read
    # every output is normalised to it (BS.1770 gates below -70)
    loudness_lufs: float = var("VF_LOUDNESS_LUFS", -16.0, ge=-70.0, le=0.0)
    # on: a speaker-similarity score and quality warnings on each result; off: neither
    quality_checks: str = var("VF_QUALITY_CHECKS", "on", choices=("on", "off"))
    # Lanes (docs/lanes.md): batch's least share of the turns both lanes want, and the
    # deadline an interactive request without one gets (seconds after it was produced; 0: none)
    batch_min_share: float = var("VF_BATCH_MIN_SHARE", 0.1, ge=0.0, le=1.0)
    # device slots beyond VF_MAX_INFLIGHT that only interactive work may take (gate.py)
    interactive_slots: int = var("VF_INTERACTIVE_SLOTS", 1, ge=0)
    interactive_deadline_s: float = var("VF_INTERACTIVE_DEADLINE_S", 0.0, ge=0.0)
    # Cancels from tts.control: remembered this long (and replayed this far back at start)
    cancel_ttl_s: int = var("VF_CANCEL_TTL_S", 86_400, ge=1)
    cancel_max_entries: int = var("VF_CANCEL_MAX_ENTRIES", 100_000, ge=1)


@dataclass(frozen=True)
class AggregatorSettings(_Checked):
    job_gap_ms: int = var("VF_JOB_GAP_MS", 300, ge=0)  # silence between clips (scripts override)
    job_timeout_seconds: int = var("VF_JOB_TIMEOUT_SECONDS", 600, ge=1)  # then it closes as partial
    # /healthz, /readyz, /metrics; -1 disables
    port: int = var("VF_AGGREGATOR_PORT", 9109, ge=-1, le=65535, hint="-1 disables")
    datadir: str = var("VF_AGGREGATOR_DATADIR", "")  # faust's folder; "": <state dir>/aggregator
    # of its changelog topic; 3 in prod
    replication_factor: int = var("VF_AGGREGATOR_REPLICATION_FACTOR", 1, ge=1)
    # usage reports (docs/usage.md) are written this often: the lag of GET /v1/usage and quotas
    usage_publish_s: float = var("VF_USAGE_PUBLISH_S", 5.0, gt=0.0)

    def datadir_path(self, environ: Mapping[str, str] | None = None) -> Path:
        return Path(self.datadir) if self.datadir else state_dir(environ) / "aggregator"


@dataclass(frozen=True)
class GatewaySettings(_Checked):
    """`voicefactory gateway` (docs/gateway.md): HTTP in front of the interactive lane."""

    host: str = var("VF_GATEWAY_HOST", "0.0.0.0")  # noqa: S104 - the Service reaches the pod
    port: int = var("VF_GATEWAY_PORT", 8080, ge=0, le=65535)
    # /healthz, /readyz, /metrics: their own listener (same host), never the API's port, so
    # an Ingress in front of the API cannot expose them
    ops_port: int = var("VF_GATEWAY_OPS_PORT", 9110, ge=0, le=65535)
    keys_file: str = var("VF_GATEWAY_KEYS_FILE", "")  # "": <state dir>/gateway-keys
    # how often the keys file is checked for changes: a revoked key fails within this
    keys_reload_s: float = var("VF_GATEWAY_KEYS_RELOAD_S", 5.0, gt=0.0)
    max_body_bytes: int = var("VF_GATEWAY_MAX_BODY_BYTES", 1024 * 1024, ge=1)
    max_upload_bytes: int = var("VF_GATEWAY_MAX_UPLOAD_BYTES", 20 * 1024 * 1024, ge=1)
    # `keys add` without --rate / --streams: requests a second and concurrent streams
    default_rate: float = var("VF_GATEWAY_DEFAULT_RATE", 10.0, gt=0.0)
    default_streams: int = var("VF_GATEWAY_DEFAULT_STREAMS", 4, ge=1)
    # vf-synth's lag on tts.requests.interactive above which speech gets 503 + Retry-After
    lag_threshold: int = var("VF_GATEWAY_LAG_THRESHOLD", 200, ge=0)
    lag_interval_s: float = var("VF_GATEWAY_LAG_INTERVAL_S", 2.0, gt=0.0)
    timeout_s: float = var("VF_GATEWAY_TIMEOUT_S", 120.0, gt=0.0)  # a speech request's whole answer
    group_id: str = var("VF_GATEWAY_GROUP_ID", "vf-gateway")  # reply partitions of tts.audio
    # Lifetime of the presigned links the gateway hands out (a job's clips and subtitles):
    # short, since a link is a bearer credential to the tenant's object.
    presign_seconds: int = var("VF_GATEWAY_PRESIGN_SECONDS", 900, ge=1, le=7 * 24 * 3600,
                               hint="S3 presigned URLs last at most 7 days")
    # a tenant's usage is read from the store at most this often per replica (quotas, /v1/usage)
    usage_cache_s: float = var("VF_GATEWAY_USAGE_CACHE_S", 5.0, ge=0.0)
    # GE2E cosine a consent recording must reach against the voice sample (docs/voices.md,
    # "Consent"); the default is pipeline.consent.DEFAULT_THRESHOLD, measured by
    # `voicefactory bench consent`. Also what `voices add --consent` applies.
    consent_threshold: float = var("VF_CONSENT_THRESHOLD", 0.92, ge=-1.0, le=1.0)

    def keys_path(self, environ: Mapping[str, str] | None = None) -> Path:
        return Path(self.keys_file) if self.keys_file else state_dir(environ) / "gateway-keys"


@dataclass(frozen=True)
class RoutingSettings(_Checked):
    """Fleet routing (docs/routing.md): workers' status on tts.fleet and how routers use it."""

    # fleet: bounded-load routing over the fleet view; voice: every record keyed by voice_id
    mode: str = var("VF_ROUTING", "fleet", choices=("fleet", "voice"))
    fleet_interval_ms: int = var("VF_FLEET_INTERVAL_MS", 500, ge=10)  # a worker's status period
    # How far past the mean load a voice's worker may go before its overflow moves on:
    # callers (gateway) keep profiles hot at 1.25; a script's lines are spread nearer even,
    # since a job ends with its busiest worker (measured: docs/benchmarks.md, routing).
    balance: float = var("VF_ROUTE_BALANCE", 1.25, ge=1.0)
    job_balance: float = var("VF_ROUTE_JOB_BALANCE", 1.05, ge=1.0)
    # A voice's request may wait at its home (or the least loaded of its copies) behind
    # this many beyond the device slots before moving: a move costs a profile build and
    # pushes a voice out of another worker's cache. 6 keeps the Zipf hit ratio >= 0.98
    # (0 gave 0.86); what it costs in waiting: docs/benchmarks.md, section 3.
    home_queue: int = var("VF_ROUTE_HOME_QUEUE", 6, ge=0)
    # A popular voice gets one more worker (a copy of its profile) for each this much of a
    # worker's share of the traffic it brings: lower spreads more voices, which waits less
    # and builds more profiles (docs/routing.md).
    copy_share: float = var("VF_ROUTE_COPY_SHARE", 0.02, gt=0.0, le=1.0)
    # A streamed request whose worker left the view before its first chunk is sent again
    # to another worker (same request_id) after at least this long; 0 turns it off.
    failover_ms: int = var("VF_ROUTE_FAILOVER_MS", 250, ge=0)
    # A worker whose queue in a lane holds this many forwards further plain-keyed records of
    # that lane to the worker the fleet view picks (its shard partition), when that one
    # would start them sooner; 0 turns it off (consumers/worker/spill.py).
    spill_queue: int = var("VF_ROUTE_SPILL_QUEUE", 8, ge=0)

    @property
    def fleet(self) -> bool:
        return self.mode == "fleet"  # `choices` made sure it is fleet or voice


@dataclass(frozen=True)
class Settings:
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    aggregator: AggregatorSettings = field(default_factory=AggregatorSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    routing: RoutingSettings = field(default_factory=RoutingSettings)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 prefix_groups: bool = True) -> Settings:
        """`prefix_groups=False` leaves `with_prefixed_groups` to a caller that changes the
        topic prefix first (the CLI's --topic-prefix)."""
        env = os.environ if environ is None else environ
        groups = {g.name: _group_from_env(_group_type(g), env) for g in fields(cls)}
        made = cls(**groups)
        return made.with_prefixed_groups(env) if prefix_groups else made

    def with_prefixed_groups(self, env: Mapping[str, str]) -> Settings:
        """VF_TOPIC_PREFIX also prefixes the consumer groups whose variable is not set: two
        environments sharing a cluster by prefix then never share `vf-synth` or
        `vf-gateway` (the aggregator's group is its app ID, prefixed the same way). A
        VF_GROUP_ID or VF_GATEWAY_GROUP_ID that is set is used exactly as given."""
        prefix = self.kafka.topic_prefix
        if not prefix:
            return self
        worker, gateway = self.worker, self.gateway
        if "VF_GROUP_ID" not in env:
            worker = replace(worker, group_id=prefix + worker.group_id)
        if "VF_GATEWAY_GROUP_ID" not in env:
            gateway = replace(gateway, group_id=prefix + gateway.group_id)
        return replace(self, worker=worker, gateway=gateway)

    def with_overrides(self, **groups: Mapping[str, Any]) -> Settings:
        """A copy with some fields replaced, by group: `with_overrides(worker={"max_batch":
        4})`. None values are skipped, so CLI flags that were not given change nothing."""
        changed: dict[str, Any] = {}
        for name, values in groups.items():
            given = {k: v for k, v in values.items() if v is not None}
            if given:
                changed[name] = replace(getattr(self, name), **given)
        return replace(self, **changed)

    def to_env(self) -> dict[str, str]:
        """Every VF_* variable with this object's value (secrets revealed): a child process
        started with it reads back exactly these settings."""
        env: dict[str, str] = {}
        for g in fields(self):
            group = getattr(self, g.name)
            for f in fields(group):
                env[f.metadata["env"]] = _render(getattr(group, f.name))
        return env


def _group_type(f: Field[Any]) -> type[Any]:
    factory = f.default_factory
    assert isinstance(factory, type), f"settings group {f.name} needs a class as its factory"
    return factory


def _group_from_env(group: type[_T], env: Mapping[str, str]) -> _T:
    values: dict[str, Any] = {}
    for f in fields(group):  # type: ignore[arg-type]
        name = f.metadata["env"]
        raw = env.get(name)
        if raw is not None:
            values[f.name] = _coerce(name, f.type, raw)
    return group(**values)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _coerce(name: str, annotation: object, raw: str) -> object:
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if kind == "bool":
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"{name} must be one of 1/0, true/false, yes/no, on/off, got {raw!r}")
    if kind == "Secret":
        return Secret(raw)
    return raw


def _render(value: object) -> str:
    if isinstance(value, Secret):
        return value.reveal()
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- where local state lives ---------------------------------------------------------------

def state_dir(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """`VF_STATE_DIR`; else `.vf/` of the VoiceFactory checkout the current directory is in;
    else the per-user state folder (`$XDG_STATE_HOME/voicefactory`, by default
    `~/.local/state/voicefactory`). Never derived from where the package is installed."""
    env = os.environ if environ is None else environ
    configured = env.get("VF_STATE_DIR")
    if configured:
        return Path(configured).expanduser()
    checkout = find_checkout(cwd or Path.cwd())
    if checkout is not None:
        return checkout / ".vf"
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path(env.get("HOME") or Path.home()) / ".local/state"
    return base / "voicefactory"


def find_checkout(start: Path) -> Path | None:
    """The nearest folder at or above `start` whose pyproject.toml is this project's."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        try:
            text = pyproject.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if _names_voicefactory(text):
            return folder
    return None


def _names_voicefactory(pyproject: str) -> bool:
    in_project = False
    for line in pyproject.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            in_project = stripped == "[project]"
        elif in_project and stripped.replace(" ", "") in ('name="voicefactory"',
                                                          "name='voicefactory'"):
            return True
    return False
