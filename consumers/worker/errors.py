"""What the worker does when the producer refuses a record: the one error policy of every
record the worker sends (results, DLQ records, audio chunks and final chunk records).

    producer.send / its delivery future raises a KafkaError -> classify(exc):
        RETRY    transient (broker down, leader moving, a timeout): back off, send again,
                 for as long as it takes; the offset stays uncommitted meanwhile
        GIVE_UP  this record can never be accepted (too large, corrupt, a policy refused
                 it): deliver() raises Undeliverable and the caller sends a smaller answer
                 (publisher.py, deadletters.py) or ends the stream failed (chunks.py)
        FATAL    the producer itself can no longer publish anything (fenced, not
                 authorized, SASL refused, closed): `on_fatal(exc)` (the worker drops
                 readiness and stops, exiting non-zero), then FatalPublishError, so the
                 record is abandoned and redelivered after the restart
    anything that is not a KafkaError (a bug) propagates unchanged.

aiokafka's `retriable` flag is the starting point, corrected both ways: with idempotence on,
aiokafka already retries retriable broker errors itself, so what reaches us flagged
non-retriable is mostly final; but KafkaTimeoutError (the send buffer stayed full, metadata
never came), BrokerNotAvailableError and KafkaUnavailableError are outages, not verdicts on
the record, and must not push a record past its offset.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from aiokafka import errors as kafka_errors
from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

OnFatal = Callable[[KafkaError], None]


class Verdict(Enum):
    RETRY = "retry"
    GIVE_UP = "give_up"
    FATAL = "fatal"


# The producer is unusable until the process restarts (or an operator fixes ACLs/secrets).
FATAL_ERRORS: tuple[type[KafkaError], ...] = (
    kafka_errors.ProducerFenced,
    kafka_errors.InvalidProducerEpoch,
    kafka_errors.OutOfOrderSequenceNumber,  # idempotence broken: a new producer id is needed
    kafka_errors.ProducerClosed,
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.GroupAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailed,
    kafka_errors.DelegationTokenAuthorizationFailed,
    kafka_errors.DelegationTokenExpired,
    kafka_errors.SaslAuthenticationFailed,
    kafka_errors.AuthenticationFailedError,
    kafka_errors.AuthenticationMethodNotSupported,
    kafka_errors.UnsupportedSaslMechanismError,
    kafka_errors.IllegalSaslStateError,
)

# Flagged non-retriable by aiokafka, but they describe the cluster's state, not the record.
TRANSIENT_ERRORS: tuple[type[KafkaError], ...] = (
    kafka_errors.KafkaTimeoutError,
    kafka_errors.BrokerNotAvailableError,
    kafka_errors.KafkaUnavailableError,
    kafka_errors.ReplicaNotAvailableError,
)


def classify(exc: KafkaError) -> Verdict:
    if isinstance(exc, FATAL_ERRORS):
        return Verdict.FATAL
    if getattr(exc, "retriable", False) or isinstance(exc, TRANSIENT_ERRORS):
        return Verdict.RETRY
    return Verdict.GIVE_UP


class Undeliverable(Exception):
    """This record can never be published (`cause` says why); send something smaller."""

    def __init__(self, cause: KafkaError) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


class FatalPublishError(RuntimeError):
    """The producer can publish nothing any more; the worker is stopping."""

    def __init__(self, cause: KafkaError) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


@dataclass(frozen=True)
class Backoff:
    """Doubling from `base_s`, capped at `max_s`, jittered down to half so that records that
    failed together do not all come back at once."""

    max_s: float = 5.0
    base_s: float = 0.2
    uniform: Callable[[float, float], float] = random.uniform

    def delay(self, tries: int) -> float:
        exp = min(self.max_s, self.base_s * 2.0 ** min(tries, 30))
        return exp * self.uniform(0.5, 1.0)


def _ignore_fatal(exc: KafkaError) -> None:
    log.critical("fatal producer error and no one to stop the worker: %s", exc)


async def deliver(attempt: Callable[[], Awaitable[T]], *, what: str, backoff: Backoff,
                  on_fatal: OnFatal | None = None,
                  ctx: Mapping[str, Any] | None = None) -> T:
    """`attempt()` (a send and its acknowledgement) until it succeeds, under the policy
    above; raises Undeliverable or FatalPublishError, never loops on a refusal that is
    final."""
    tries = 0
    while True:
        try:
            return await attempt()
        except KafkaError as exc:
            verdict = classify(exc)
            if verdict is Verdict.FATAL:
                (on_fatal or _ignore_fatal)(exc)
                raise FatalPublishError(exc) from exc
            if verdict is Verdict.GIVE_UP:
                raise Undeliverable(exc) from exc
            tries += 1
            delay = backoff.delay(tries)
            log.warning("publishing the %s failed (%s: %s), retrying in %.1f s", what,
                        type(exc).__name__, exc, delay, extra=dict(ctx or {}))
            await asyncio.sleep(delay)
