"""The fuzz suite on the real stack: generated records on every topic a worker or the job
aggregator reads (bench/fuzzgen.py), and what must hold after them (bench/fuzzcheck.py).

CI size: VF_FUZZ_EXAMPLES (default 40) drawn records a topic besides the fixed edge cases;
VF_FUZZ_SEED replays a run (each report names its seed); `voicefactory bench fuzz` is the
longer run (docs/benchmarks.md, "Fuzz suite").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.fuzzagg import fuzz_aggregator
from bench.fuzzcheck import fuzz_settings, fuzz_worker
from bench.fuzzrun import FuzzPlan
from consumers.settings import Settings
from consumers.wiring import make_store

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
