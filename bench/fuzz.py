"""`voicefactory bench fuzz`: the fuzz suite at bench size, with its figures.

The CI run (tests/integration/test_fuzz_topics.py) draws 40 records a topic; this one draws
EXAMPLES (quick: 150, full: 600) on each of tts.requests, tts.requests.interactive,
tts.voices, tts.control and tts.results, besides the fixed edge cases:

    fresh topics + the bench voice -> bench.fuzzcheck.fuzz_worker (a worker in this
    process) -> fresh topics -> bench.fuzzagg.fuzz_aggregator (`voicefactory aggregator`
    in its own process) -> figures (records tried, refused, answered, DLQ'd, max time to an
    answer, workers restarted, partitions committed to the end) and the properties that
    failed (`fuzz_failures`, each named in the notes).

VF_FUZZ_SEED replays a run, VF_FUZZ_EXAMPLES overrides the size, VF_FUZZ_EXCLUDE leaves
features out (bench.fuzzgen.FEATURES) to see past a known bug.
"""

from __future__ import annotations

from bench.harness import BenchContext
from bench.outcome import Outcome, md_table
from topics.specs import ALL_TOPICS

VOICE = "fuzz-voice"
EXAMPLES = {True: 150, False: 600}
_ROWS = ("tried", "refused", "produced", "answered", "results", "dlq", "failed", "unanswered",
         "duplicates", "max_answer_s")
_TOPICS = ("requests", "interactive", "control", "voices", "results")


async def run(ctx: BenchContext) -> Outcome:
    # hypothesis (a dev dependency) only when this measurement runs
    from bench.fuzzagg import fuzz_aggregator
    from bench.fuzzcheck import fuzz_settings, fuzz_worker
    from bench.fuzzrun import FuzzPlan
    from consumers.wiring import make_store

    plan = FuzzPlan.from_env(examples=EXAMPLES[ctx.quick])
    s = fuzz_settings(await ctx.settings("fuzz", specs=ALL_TOPICS))
    ctx.register([VOICE])
    worker = await fuzz_worker(s, voice=VOICE, plan=plan, store=make_store(s.store))
    a = await ctx.settings("fuzzagg", specs=ALL_TOPICS)
    aggregator = await fuzz_aggregator(a, plan=plan, work_dir=ctx.work_dir)
    figures = {**worker.figures, **aggregator.figures,
               "fuzz_examples": plan.examples, "fuzz_seed": plan.seed,
               "fuzz_failures": len(worker.failures) + len(aggregator.failures)}
    rows: list[list[object]] = [[name.replace("_", " "), *(
        figures.get(f"fuzz_{topic}_{name}") for topic in _TOPICS)] for name in _ROWS]
    table = md_table(["per topic", *_TOPICS], rows) + "\n\n" + md_table(
        ["run", "value"], [[k.removeprefix("fuzz_"), figures[k]] for k in (
            "fuzz_seconds", "fuzz_workers_restarted", "fuzz_loops_alive",
            "fuzz_partitions_at_end", "fuzz_partitions", "fuzz_sentinels_succeeded",
            "fuzz_sentinels", "fuzz_jobs_emitted", "fuzz_sentinel_job_s",
            "fuzz_aggregator_emit_retries", "fuzz_aggregator_partitions_at_end",
            "fuzz_aggregator_seconds", "fuzz_failures") if k in figures])
    notes = [plan.describe(), *worker.notes, *aggregator.notes]
    notes += [f"FAILED (worker): {f}" for f in worker.failures[:20]]
    notes += [f"FAILED (aggregator): {f}" for f in aggregator.failures[:20]]
    return Outcome(name="fuzz", figures=figures, table=table, notes=notes)
