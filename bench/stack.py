"""What the benchmarks need from the local stack, as a Protocol: bench/ never imports deploy/.

    voicefactory.py (the CLI, which may import deploy/) --hands in `deploy.local.stack`-->
    bench.runner.main(stack=...) --> BenchContext.stack --> bench.faults (broker restart,
    S3 outage) and the runner's "is it up" check

`deploy/local/stack.py` implements it with module-level functions (a module satisfies a
Protocol structurally); tests hand in a fake.
"""

from __future__ import annotations

from typing import Protocol


class LocalStack(Protocol):
    def all_answering(self) -> bool:
        """Kafka and the S3 server both accept connections."""
        ...

    def ensure_up(self, timeout_s: float = 120.0) -> None:
        """Start whatever is not running (idempotent) and wait until everything answers."""
        ...

    def broker_started_here(self) -> bool:
        """The broker runs from this stack's pid file, so a fault run may restart it."""
        ...

    def restart_broker(self, timeout_s: float = 120.0) -> None:
        """SIGTERM the broker, wait until it is gone, start it again and wait for it."""
        ...

    def store_started_here(self) -> bool:
        """The S3 server runs from this stack's pid file, so a fault run may kill it."""
        ...

    def kill_store(self) -> None:
        """SIGKILL the S3 server (an outage; `ensure_up` brings it back)."""
        ...

    def server_pids(self) -> dict[str, int]:
        """The broker's and the S3 server's pids ("kafka", "s3"), for those running from this
        stack's pid files: the capacity run counts their CPU beside the worker's."""
        ...
