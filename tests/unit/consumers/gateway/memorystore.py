"""The ObjectStore calls the gateway's routes make, over a dict: what the route does with the
bytes is what these unit tests check (the real store has its own tests on the S3 server)."""

from __future__ import annotations

from pipeline.storage import ObjectInfo


class MemoryStore:
    bucket = "voicefactory"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        self.objects[key] = data

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def stat(self, key: str) -> ObjectInfo | None:
        data = self.objects.get(key)
        return ObjectInfo(key, len(data), {}) if data is not None else None

    def list_prefix(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def presign(self, key: str, expires_s: int) -> str:
        """A link that says what it grants (the real one is S3's, tested on the server)."""
        return f"memory://{self.bucket}/{key}?expires={expires_s}"
