"""Job revisions: which lines a new version re-produces, and what its manifest carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

import voicefactory
from consumers.aggregator.state import (
    JobState,
    build_job,
    decode_manifest,
    emitted_marker,
    merge,
    needs_opening,
    open_version,
)
from consumers.clients import jobs
from consumers.clients.revisions import (
    RevisionError,
    UnknownJob,
    plan_lines,
    prepare_rerun,
    prepare_run,
    revision_request_id,
)
from consumers.clients.scripts import Script, parse_script
from pipeline.keys import job_json_key, job_script_key
from pipeline.storage import ObjectInfo
from topics.events import (
    AudioRef,
    ErrorInfo,
    JobRef,
    SynthesisResult,
    decode_job,
    encode,
)

TEXTS = [f"Line number {i}." for i in range(6)]


class DictStore:
    """The few ObjectStore calls revisions make, over a dict (the real store has its own
    tests against the S3 server)."""

    bucket = "vf"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def put(self, key: str, data: bytes, content_type: str,
            metadata: dict[str, str] | None = None) -> None:
        self.objects[key] = data

    def stat(self, key: str) -> ObjectInfo | None:
        if key.startswith("voices/") or key in self.objects:
            return ObjectInfo(key=key, size=len(self.objects.get(key, b"")), metadata={})
        return None


def _script(texts: list[str], job_id: str = "ep7", **line_options: Any) -> Script:
    return parse_script({"job_id": job_id, "language": "en",
                         "lines": [{"voice": "narrator", "text": t, **line_options}
                                   for t in texts]})


def _answer(request_id: str, job: JobRef, ok: bool) -> SynthesisResult:
    audio = AudioRef(bucket="vf", key=f"audio/2031/01/01/{request_id}.wav", url="old-url",
                     format="wav", sample_rate=24000, duration_s=1.0, bytes=1,
                     sha256="0" * 64) if ok else None
    return SynthesisResult(request_id=request_id, voice_id="narrator",
                           status="succeeded" if ok else "rejected",
                           completed_at="2031-01-01T00:00:00Z", audio=audio, job=job,
                           error=None if ok else ErrorInfo(code="unsupported_language",
                                                           message="no"))


def _finish(store: DictStore, script: Script, *, bad: frozenset[int] = frozenset(),
            state: JobState | None = None) -> JobState:
    """What the worker and aggregator would do: answer every produced line (those in
    `bad` rejected), close the version, store its job.json."""
    version = script.manifest.version
    if needs_opening(state, _answer("x", JobRef(id=script.job_id, index=0, total=1,
                                                 version=version), True)):
        state = open_version(script.job_id, version, script.manifest, 1.0) or state
    for request in script.requests:
        assert request.job is not None
        state = merge(state, _answer(request.request_id, request.job,
                                     request.job.index not in bad), 2.0) or state
    assert state is not None and state.complete
    event = build_job(state, manifest=script.manifest, gap_ms=300, completed_at="t")
    store.put(job_json_key(script.job_id, version), encode(event), "application/json")
    return emitted_marker(state, event.status, 3.0)


def _submit(store: DictStore, script: Script) -> Any:
    return jobs.submit(store, script)  # type: ignore[arg-type]


def test_plan_names_changed_new_and_failed_lines_and_nothing_else() -> None:
    before = _script(TEXTS[:4]).manifest
    clips = _event_clips(before, bad={2})
    after = _script([TEXTS[0], "A new second line.", TEXTS[2], TEXTS[3], TEXTS[4]]).manifest
    assert plan_lines(before.lines, clips, after.lines) == {1: "changed", 2: "failed",
                                                            4: "new"}
    # The same script: nothing, unless failed lines are asked for, or lines by index.
    assert plan_lines(before.lines, clips, before.lines) == {}
    assert plan_lines(before.lines, clips, before.lines, failed=True) == {2: "failed"}
    assert plan_lines(before.lines, clips, before.lines, asked=frozenset({0, 3})) == \
        {0: "asked", 3: "asked"}
    with pytest.raises(RevisionError, match=r"line index 9 is outside 0\.\.3"):
        plan_lines(before.lines, clips, before.lines, asked=frozenset({9}))


def test_a_change_of_language_or_format_is_a_change_and_legacy_manifests_compare_text() -> None:
    before = _script(TEXTS[:2]).manifest
    clips = _event_clips(before)
    after = _script(TEXTS[:2], format="mp3").manifest
    assert plan_lines(before.lines, clips, after.lines) == {0: "changed", 1: "changed"}
    legacy = [msgspec.structs.replace(line, options=None) for line in before.lines]
    assert plan_lines(legacy, clips, after.lines) == {}


def _event_clips(manifest: Any, bad: set[int] | None = None) -> list[Any]:
    state: JobState | None = None
    for line in manifest.lines:
        state = merge(state, _answer(line.request_id, JobRef(id=manifest.job_id,
                                                              index=line.index,
                                                              total=manifest.total),
                                     line.index not in (bad or set())), 1.0) or state
    assert state is not None
    return build_job(state, manifest=manifest, gap_ms=0, completed_at="t").clips


def test_a_revision_produces_only_its_lines_under_new_ids_and_carries_the_rest() -> None:
    store = DictStore()
    first = _submit(store, _script(TEXTS))
    assert first.version == 1 and len(first.requests) == 6 and not first.unchanged
    v1 = _finish(store, first.script, bad=frozenset({4}))

    fixed = TEXTS[:]
    fixed[1] = "Line one, rewritten."
    second = _submit(store, _script(fixed))
    assert (second.version, second.reasons) == (2, {1: "changed", 4: "failed"})
    assert [r.request_id for r in second.requests] == ["ep7-v2-0001", "ep7-v2-0004"]
    assert all(r.job is not None and r.job.version == 2 and r.job.total == 6
               for r in second.requests)
    stored = decode_manifest(store.objects[job_script_key("ep7", 2)])
    assert stored.base_version == 1 and [c.index for c in stored.carried] == [0, 2, 3, 5]
    assert [line.text for line in stored.lines] == fixed
    assert "version 2 re-produces 2 of 6 lines (changed 1, failed 4); 4 carried" in \
        second.describe()
    # Version 1's objects are untouched; the aggregator closes version 2 from both.
    assert job_script_key("ep7", 1) in store.objects and job_json_key("ep7", 1) in store.objects
    assert v1.emitted and v1.version == 1
    v2 = _finish(store, second.script, state=v1)
    assert v2.version == 2 and v2.emitted and v2.status == "succeeded"
    event = decode_job(store.objects[job_json_key("ep7", 2)])
    assert event.version == 2 and event.status == "succeeded" and event.missing == []
    assert [c.version for c in event.clips] == [1, 2, 1, 1, 2, 1]
    assert [c.request_id for c in event.clips][1::3] == ["ep7-v2-0001", "ep7-v2-0004"]
    assert [s.index for s in event.timeline] == list(range(6))
    assert decode_job(store.objects[job_json_key("ep7", 1)]).status == "partial"

    # The same script again: a no-op that says so.
    again = _submit(store, _script(fixed))
    assert again.unchanged and again.requests == [] and again.version == 2
    assert "unchanged since version 2, nothing produced" in again.describe()
    assert job_script_key("ep7", 3) not in store.objects


def test_rerun_failed_and_by_index_from_the_stored_script() -> None:
    store = DictStore()
    first = _submit(store, _script(TEXTS[:3], format="flac"))
    _finish(store, first.script, bad=frozenset({2}))
    unchanged = _submit(store, _script(TEXTS[:3], format="flac"))
    assert unchanged.unchanged and unchanged.without_audio == [2]
    assert "`job rerun ep7 --failed` re-runs them" in unchanged.describe()

    rerun = prepare_rerun(store, "ep7", failed=True, lines=frozenset({0}))  # type: ignore[arg-type]
    assert rerun.reasons == {0: "asked", 2: "failed"}
    assert [(r.request_id, r.format, r.language) for r in rerun.requests] == \
        [("ep7-v2-0000", "flac", "en"), ("ep7-v2-0002", "flac", "en")]
    with pytest.raises(UnknownJob, match="never-run is unknown"):
        prepare_rerun(store, "never-run", failed=True)  # type: ignore[arg-type]


def test_a_rerun_waits_for_the_open_version_to_close() -> None:
    store = DictStore()
    first = _submit(store, _script(TEXTS[:3], job_id="ep8"))
    with pytest.raises(RevisionError, match="no finished version") as open_v1:
        prepare_rerun(store, "ep8", failed=True)  # type: ignore[arg-type]
    assert not isinstance(open_v1.value, UnknownJob)  # known, only not closed yet
    _finish(store, first.script, bad=frozenset({1}))
    second = jobs.submit_rerun(store, "ep8", failed=True)  # type: ignore[arg-type]
    assert second.version == 2 and second.reasons == {1: "failed"}
    # v2's script.json is stored, its job.json not yet: another re-run would plan v2 again
    with pytest.raises(RevisionError, match="version 2 is still open"):
        jobs.submit_rerun(store, "ep8", lines=frozenset({0}), failed=False)  # type: ignore[arg-type]
    assert job_script_key("ep8", 3) not in store.objects


def test_a_version_still_open_is_planned_again_not_stacked() -> None:
    store = DictStore()
    _finish(store, _submit(store, _script(TEXTS[:2])).script)
    changed = _script(["Changed.", TEXTS[1]])
    assert _submit(store, changed).version == 2
    assert _submit(store, changed).version == 2  # v2 has no job.json yet: same version


def test_removing_lines_only_is_refused_with_a_reason() -> None:
    store = DictStore()
    _finish(store, _submit(store, _script(TEXTS[:3])).script)
    with pytest.raises(RevisionError, match="lines were only removed"):
        prepare_run(store, _script(TEXTS[:2]))  # type: ignore[arg-type]


def test_revision_request_ids_must_fit_the_id_limit() -> None:
    assert revision_request_id("ep7", 3, 12) == "ep7-v12-0003"
    with pytest.raises(RevisionError, match="too long for revisions"):
        revision_request_id("j" * 122, 0, 2)


def test_job_rerun_without_a_selection_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert voicefactory.main(["job", "rerun", "ep7"]) == 2
    assert "--failed and/or --lines" in capsys.readouterr().err


def test_job_run_on_an_unchanged_finished_job_says_so_and_exits_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = DictStore()
    script = _script(TEXTS[:2])
    _finish(store, jobs.submit(store, script).script)  # type: ignore[arg-type]
    monkeypatch.setattr(jobs, "make_store", lambda _store: store)
    path = tmp_path / "ep7.json"
    path.write_bytes(orjson.dumps({"job_id": "ep7", "language": "en",
                                   "lines": [{"voice": "narrator", "text": t}
                                             for t in TEXTS[:2]]}))
    assert voicefactory.main(["job", "run", str(path), "--bootstrap", "127.0.0.1:1"]) == 0
    assert "job ep7: unchanged since version 1, nothing produced" in capsys.readouterr().err
    assert sorted(store.objects) == [job_json_key("ep7"), job_script_key("ep7")]
