"""Object storage over any S3 server through the `minio` SDK.

put/put_new/get/stat/presign are the only operations the pipeline needs (put_new writes an
object only where none is, for audio written once); every S3 or connection
failure becomes a retryable `storage_error`, and a missing object returns None rather than
raising, because "not there yet" is an ordinary answer (idempotency checks, voice lookups).

Connections: one urllib3 pool of `pool_size` keep-alive connections, as many as threads that
talk to S3 at once (a smaller pool closes the surplus after each request, and the next one
pays a TCP set-up: 14 % of a worker's samples in the capacity benchmark). A connection the
server dropped while idle is replaced on checkout; one that dies mid-request is retried once,
at once, on a fresh connection. The server must keep connections alive: the Versity gateway
only does with `--keep-alive` (the local stack passes it).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import urllib3
from minio import Minio
from minio.error import S3Error

from topics.errors import ErrorCode, VoiceFactoryError

_MISSING = {"NoSuchKey", "NoSuchObject", "NotFound", "NoSuchBucket"}
# A worker's default concurrency: 2 x max_inflight (2) dispatchers, a health check, spare.
DEFAULT_POOL_SIZE = 8


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    metadata: dict[str, str]


class ObjectStore:
    def __init__(self, *, endpoint: str, access_key: str, secret_key: str, bucket: str,
                 region: str = "us-east-1", pool_size: int = DEFAULT_POOL_SIZE) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=3.0, read=30.0),
            # One retry, without backoff, of a connection that failed (refused, reset, closed
            # before the answer): a pooled connection the server has just dropped. Anything
            # longer is an outage, and the worker's retry policy decides, not urllib3.
            retries=urllib3.Retry(total=1, connect=1, read=1, status=0, other=0,
                                  backoff_factor=0, raise_on_status=False),
            maxsize=pool_size,
        )
        self.pool_size = pool_size
        self.bucket = bucket
        self.endpoint = endpoint
        self._client = Minio(parts.netloc, access_key=access_key, secret_key=secret_key,
                             secure=parts.scheme == "https", region=region, http_client=http)

    def reachable(self) -> bool:
        try:
            return bool(self._client.bucket_exists(self.bucket))
        except (S3Error, urllib3.exceptions.HTTPError, OSError):
            return False

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        try:
            self._client.put_object(self.bucket, key, io.BytesIO(data), len(data),
                                    content_type=content_type, metadata=metadata)  # type: ignore[arg-type]
        except (S3Error, urllib3.exceptions.HTTPError, OSError) as exc:
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"put {key}: {exc}") from exc

    def put_new(self, key: str, data: bytes, content_type: str,
                metadata: dict[str, str] | None = None) -> bool:
        """put, unless an object is already stored under `key`: False then, and it stays.

        One PUT with `If-None-Match: *` (S3 conditional writes; the Versity gateway, MinIO
        and AWS refuse it with 412 when the key exists), so two writers racing for one key
        cannot both win. A server that ignores the header overwrites, as put does. The SDK
        has no public call with that header: its single-PUT step takes raw headers.
        """
        headers: dict[str, str | list[str] | tuple[str]] = {
            "Content-Type": content_type, "If-None-Match": "*"}
        headers.update({f"X-Amz-Meta-{k}": v for k, v in (metadata or {}).items()})
        try:
            self._client._put_object(self.bucket, key, data, headers)
        except S3Error as exc:
            if exc.code == "PreconditionFailed":
                return False
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"put {key}: {exc}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"put {key}: {exc}") from exc
        return True

    def get(self, key: str) -> bytes | None:
        response = self._missing_is_none("get", key, self._client.get_object)
        if response is None:
            return None
        try:
            return bytes(response.read())
        finally:
            response.close()
            response.release_conn()

    def stat(self, key: str) -> ObjectInfo | None:
        info = self._missing_is_none("stat", key, self._client.stat_object)
        if info is None:
            return None
        meta = {k.lower().removeprefix("x-amz-meta-"): v for k, v in (info.metadata or {}).items()
                if k.lower().startswith("x-amz-meta-")}
        return ObjectInfo(key=key, size=int(info.size or 0), metadata=meta)

    def _missing_is_none(self, op: str, key: str, call: Callable[[str, str], Any]) -> Any:
        """`call(bucket, key)`, with "no such object" as None and other failures retryable."""
        try:
            return call(self.bucket, key)
        except S3Error as exc:
            if exc.code in _MISSING:
                return None
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"{op} {key}: {exc}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"{op} {key}: {exc}") from exc

    def presign(self, key: str, expires_s: int) -> str:
        try:
            return str(self._client.presigned_get_object(self.bucket, key,
                                                         expires=timedelta(seconds=expires_s)))
        except (S3Error, ValueError) as exc:
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"presign {key}: {exc}") from exc

    def delete(self, key: str) -> None:
        """Remove one object; a missing object is not an error (S3 semantics)."""
        try:
            self._client.remove_object(self.bucket, key)
        except (S3Error, urllib3.exceptions.HTTPError, OSError) as exc:
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"delete {key}: {exc}") from exc

    def list_prefix(self, prefix: str) -> list[str]:
        try:
            return [o.object_name for o in self._client.list_objects(
                self.bucket, prefix=prefix, recursive=True) if o.object_name]
        except (S3Error, urllib3.exceptions.HTTPError, OSError) as exc:
            raise VoiceFactoryError(ErrorCode.STORAGE_ERROR, f"list {prefix}: {exc}") from exc
