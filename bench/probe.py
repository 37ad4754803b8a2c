"""`python -m bench.probe FILE`: a synthesis worker that also reports on itself.

The worker is built exactly as `voicefactory worker` builds it (settings from VF_*,
`consumers.wiring.build_worker`); beside it, a task on the same event loop appends one JSON
line to FILE every SAMPLE_S seconds: wall time, RSS from /proc, requests answered, and the
profile LRU's entries, bytes, byte bound and evictions. The memory benchmark reads FILE.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from consumers import logs
from consumers.settings import Settings
from consumers.wiring import build_worker
from consumers.worker.loop import SynthesisWorker

SAMPLE_S = 0.5


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def profile_cache(processor: Any) -> Any:
    """The worker's ProfileCache: RequestProcessor -> its ProfileResolver -> `.cache`."""
    resolver = getattr(processor, "_profiles", None)
    cache = getattr(resolver, "cache", None)
    if cache is None:
        raise RuntimeError("the processor's profile resolver exposes no `.cache`")
    return cache


async def _report(worker: SynthesisWorker, cache: Any, out: Path) -> None:
    with out.open("ab") as f:
        while True:
            stats = cache.stats()
            f.write(orjson.dumps({"t": time.time(), "rss": _rss(), "processed": worker.processed,
                                  "entries": stats.entries, "bytes": stats.bytes,
                                  "max_bytes": cache.max_bytes,
                                  "evictions": stats.evictions}) + b"\n")
            f.flush()
            await asyncio.sleep(SAMPLE_S)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.probe FILE", file=sys.stderr)
        return 2
    logs.configure("text")
    runtime = build_worker(Settings.from_env())
    cache = profile_cache(runtime.processor)

    async def run() -> None:
        worker = runtime.worker
        worker.install_signal_handlers()
        reporter = asyncio.create_task(_report(worker, cache, Path(argv[0])))
        try:
            await worker.run()
        finally:
            reporter.cancel()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
