from pathlib import Path

import pytest

from bench.processes import WorkerProcess
from consumers.settings import Settings


async def test_wait_log_reads_only_what_this_process_wrote(tmp_path: Path) -> None:
    """A work dir keeps every run's logs under the same names (peers-worker0.log): an earlier
    run's "assigned partitions" is not this worker being ready."""
    log = tmp_path / "w.log"
    log.write_text("2026-12-06 INFO assigned partitions [0, 1, 2]\n")  # the run before
    quiet = WorkerProcess(Settings(), log, module="timeit",
                          args=["-n", "1", "-r", "1", "import time; time.sleep(20)"])
    try:
        with pytest.raises(TimeoutError, match="assigned partitions"):
            await quiet.wait_log("assigned partitions", 1.0)
        assert "assigned partitions" not in quiet.log_text()
    finally:
        await quiet.stop()
    ready = WorkerProcess(Settings(), log, module="timeit",
                          args=["-s", "print('assigned partitions [3]', flush=True)",
                                "-n", "1", "-r", "1", "import time; time.sleep(20)"])
    try:
        await ready.wait_log("assigned partitions", 60)
        assert ready.log_text().startswith("assigned partitions [3]")
    finally:
        await ready.stop()
    assert log.read_text().startswith("2026-12-06 INFO assigned partitions [0, 1, 2]\n")
