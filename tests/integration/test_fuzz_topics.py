"""The fuzz suite on the real stack: generated records on every topic a worker or the job
aggregator reads (bench/fuzzgen.py), and what must hold after them (bench/fuzzcheck.py).

CI size: VF_FUZZ_EXAMPLES (default 40) drawn records a topic besides the fixed edge cases;
VF_FUZZ_SEED replays a run (each report names its seed); `voicefactory bench fuzz` is the
longer run (docs/benchmarks.md, "Fuzz suite").
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fuzzagg import fuzz_aggregator
from bench.fuzzcheck import fuzz_settings, fuzz_worker, wait_ready
from bench.fuzzrun import AnswerLog, FuzzPlan, until, wait_committed
from bench.processes import InProcessWorker
from consumers.settings import Settings
from consumers.wiring import make_store
from topics.events import SynthesisRequest, encode
from topics.partitioning import partition_for
from topics.specs import REQUESTS, topic_names

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.timeout(420)]


async def test_a_worker_answers_every_generated_record_and_stays_ready(
        settings: Settings, voice: str) -> None:
    s = fuzz_settings(settings)
    report = await fuzz_worker(s, voice=voice, plan=FuzzPlan.from_env(examples=40),
                               store=make_store(s.store))
    print(report.describe(), file=sys.stderr)
    assert not report.failures, report.describe()
    assert report.figures["fuzz_workers_restarted"] == 0


async def test_the_aggregator_survives_generated_results_and_still_closes_a_job(
        settings: Settings, tmp_path: Path) -> None:
    report = await fuzz_aggregator(settings, plan=FuzzPlan.from_env(examples=40),
                                   work_dir=tmp_path)
    print(report.describe(), file=sys.stderr)
    assert not report.failures, report.describe()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
async def test_a_header_name_that_is_not_utf8_does_not_stop_its_partition(
        settings: Settings, voice: str) -> None:
    """Kafka header names are strings, but a librdkafka producer writes any bytes (here kcat,
    from argv): aiokafka then raises UnicodeDecodeError on every fetch of that partition.
    The record must be answered (DLQ) and the request after it served."""
    s = fuzz_settings(settings)
    names = topic_names(s.kafka.topic_prefix)
    partition = partition_for(voice, REQUESTS.partitions)
    worker = InProcessWorker(s)
    worker.start()
    try:
        await wait_ready(worker)
        kcat = subprocess.run(
            ["kcat", "-P", "-b", s.kafka.bootstrap, "-t", names.requests, "-p", str(partition),
             "-k", voice, "-H", b"\xff\xfe-name=v".decode("latin-1").encode("latin-1")],
            input=b"\xff not json\n", capture_output=True, timeout=30, check=False)
        assert kcat.returncode == 0, kcat.stderr
        after = SynthesisRequest(request_id="after-bad-header", voice_id=voice,
                                 text="Served after a bad header.", language="en")
        async with AnswerLog(s, results=names.results, dlq=names.dlq) as answers:
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(bootstrap_servers=s.kafka.bootstrap, acks="all")
            await producer.start()
            try:
                await producer.send_and_wait(names.requests, encode(after),
                                             key=voice.encode(), partition=partition)
            finally:
                await producer.stop()
            assert await until(lambda: bool(answers.results.get("after-bad-header")), 60), \
                "the partition stopped"
            assert (names.requests, partition, 0) in answers.dlq
        behind = await wait_committed(s.kafka, s.worker.group_id, [names.requests], 30)
        assert not behind, behind
    finally:
        await worker.stop(timeout_s=30)
