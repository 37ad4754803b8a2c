"""Why Kafka refused this process, in one line, so that it stops instead of retrying.

    a client's start or a call raises --explain(exc, kafka)--> one line naming the principal
        and the topic or group it was denied (authorization), or, for aiokafka's bare
        "Unable to bootstrap", the cause found by diagnose(): one connection dialled to the
        first broker shows a refused login, a certificate the CA file does not vouch for,
        a TLS/plaintext mismatch, or nothing listening
        --> the CLI prints `error: <line>` and exits 1; the gateway logs it as its one
            error line before uvicorn exits (code 3)

None of these heals by waiting, so none is retried: a wrong password, an untrusted CA and a
missing ACL each end the process at start with its own message. The lines name the user
and the CA file's path, never the password.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from consumers.kafka import security_kwargs
from consumers.settings import KafkaSettings

ACCESS_ERRORS: tuple[type[KafkaError], ...] = (
    TopicAuthorizationFailedError, GroupAuthorizationFailedError,
    TransactionalIdAuthorizationFailed, ClusterAuthorizationFailedError,
    SaslAuthenticationFailed, AuthenticationFailedError)


def is_access_error(exc: BaseException) -> bool:
    """Denied, not unavailable: retrying cannot help."""
    return isinstance(exc, ACCESS_ERRORS)


def principal(kafka: KafkaSettings) -> str:
    if kafka.security_protocol.upper().startswith("SASL") and kafka.sasl_username:
        return f"User:{kafka.sasl_username}"
    return "User:ANONYMOUS"


def _names(args: Iterable[object]) -> str:
    names: list[str] = []
    for arg in args:
        if isinstance(arg, set | frozenset | list | tuple):
            names += sorted(str(a) for a in arg)
        elif arg is not None and str(arg):
            names.append(str(arg))
    return ", ".join(names) or "(not named by the broker)"


def explain(exc: BaseException, kafka: KafkaSettings) -> str | None:
    """The one-line reason for an access failure, or None when `exc` is not one (and not
    a bootstrap failure, which `diagnose` explains)."""
    who = principal(kafka)
    if isinstance(exc, TopicAuthorizationFailedError):
        return (f"Kafka denied {who} access to topic {_names(exc.args)}: no ACL allows it "
                f"(run this process with the role that owns the topic, or grant the ACL)")
    if isinstance(exc, GroupAuthorizationFailedError):
        return (f"Kafka denied {who} access to consumer group {_names(exc.args)}: no ACL "
                f"allows it (run this process with the role that owns the group)")
    if isinstance(exc, TransactionalIdAuthorizationFailed):
        return f"Kafka denied {who} its transactional id: no ACL allows it"
    if isinstance(exc, ClusterAuthorizationFailedError):
        return f"Kafka denied {who} a cluster-level operation: it needs the admin role"
    if isinstance(exc, SaslAuthenticationFailed | AuthenticationFailedError):
        return _login_refused(kafka)
    return None


def _login_refused(kafka: KafkaSettings) -> str:
    return (f"Kafka at {kafka.bootstrap} refused the login of {principal(kafka)} "
            f"({kafka.sasl_mechanism or 'PLAIN'}): wrong username or password "
            f"(VF_KAFKA_SASL_USERNAME / VF_KAFKA_SASL_PASSWORD)")


async def diagnose(kafka: KafkaSettings, timeout_s: float = 10.0) -> str:
    """Dial the first bootstrap broker with these settings and say why it fails."""
    first = kafka.bootstrap.split(",")[0].strip()
    return (await refused_login(kafka, timeout_s)
            or f"Kafka at {first} accepts this login; the other bootstrap brokers did not answer")


async def refused_login(kafka: KafkaSettings, timeout_s: float = 10.0) -> str | None:
    """Why the first bootstrap broker refuses a connection with these settings (login, TLS,
    nothing listening), in one line; None when it accepts it. For clients whose own start
    reports a refusal poorly (faust: a traceback ending in "Unable to bootstrap")."""
    first = kafka.bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    try:
        conn = await asyncio.wait_for(
            create_conn(host, int(port), request_timeout_ms=int(timeout_s * 1000),
                        client_id="voicefactory-diagnose", **security_kwargs(kafka)),
            timeout_s)
    except ssl.SSLCertVerificationError as exc:
        cafile = kafka.ssl_cafile or "the system's trust store"
        return (f"TLS to Kafka at {first} failed: its certificate is not trusted by {cafile} "
                f"({exc.verify_message}); set VF_KAFKA_SSL_CAFILE to the cluster's CA")
    except ssl.SSLError as exc:
        return f"TLS to Kafka at {first} failed: {exc.reason or exc}"
    except (SaslAuthenticationFailed, AuthenticationFailedError):
        return _login_refused(kafka)
    except ConnectionRefusedError:
        return f"nothing listens at {first} (VF_KAFKA_BOOTSTRAP={kafka.bootstrap})"
    except KafkaConnectionError as exc:
        hint = ""
        if kafka.security_protocol.upper() in ("PLAINTEXT", "SASL_PLAINTEXT"):
            hint = "; if the listener speaks TLS, set VF_KAFKA_SECURITY_PROTOCOL=SASL_SSL or SSL"
        return f"Kafka at {first} closed the connection: {exc}{hint}"
    except (OSError, TimeoutError) as exc:
        return f"cannot reach Kafka at {first}: {exc or type(exc).__name__}"
    conn.close()
    return None


async def reason(exc: BaseException, kafka: KafkaSettings) -> str | None:
    """`explain`, and for a bootstrap failure what `diagnose` finds (inside an event loop:
    the gateway's start-up)."""
    line = explain(exc, kafka)
    if line is None and isinstance(exc, KafkaConnectionError) and "bootstrap" in str(exc):
        line = await diagnose(kafka)
    return line


def explain_or_diagnose(exc: BaseException, kafka: KafkaSettings) -> str | None:
    """`explain`, and for a bootstrap failure the reason `diagnose` finds (synchronously:
    for the CLI, after its event loop has ended)."""
    line = explain(exc, kafka)
    if line is None and isinstance(exc, KafkaConnectionError) and "bootstrap" in str(exc):
        line = asyncio.run(diagnose(kafka))
    return line
