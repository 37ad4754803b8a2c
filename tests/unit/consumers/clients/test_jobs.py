"""`job run`: progress, summary, exit codes (no servers); script parsing: test_scripts.py."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

import voicefactory
from consumers.clients.jobs import Progress, ProgressLine, describe_job, summary_table
from consumers.clients.scripts import Script, ScriptError, load_script
from consumers.clients.tail import result_line
from tests.unit.consumers.clients.test_scripts import SCRIPT, _write
from topics.events import AudioRef, ErrorInfo, JobCompleted, JobRef, SynthesisResult


def test_a_bad_script_exits_2_before_touching_any_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "job_id: j\nlines:\n  - voice: a\n")
    code = voicefactory.main(["job", "run", str(path), "--bootstrap", "127.0.0.1:1"])
    assert code == 2
    assert "line 1: voice and text are required" in capsys.readouterr().err


def _result(i: int, status: str = "succeeded", dur: float = 1.5) -> SynthesisResult:
    audio = AudioRef(bucket="vf", key=f"audio/2031/01/01/ep12-{i:04d}.wav", url="u",
                     format="wav", sample_rate=22050, duration_s=dur, bytes=1,
                     sha256="0" * 64) if status == "succeeded" else None
    return SynthesisResult(request_id=f"ep12-{i:04d}", voice_id="narrator",
                           status=status,  # type: ignore[arg-type]
                           completed_at="2031-01-01T00:00:00Z", audio=audio,
                           error=None if audio else ErrorInfo(code="voice_not_found",
                                                              message="no voice 'kid'"),
                           job=JobRef(id="ep12", index=i, total=3))


def test_progress_shows_done_failed_rate_and_eta() -> None:
    progress = Progress(total=4, started=100.0)
    assert progress.render(now=100.5) == \
        "[------------------------] 0/4  ok 0  failed 0  0.00 lines/s  ETA --"
    progress.add(_result(0))
    progress.add(_result(1, status="failed"))
    assert progress.render(now=110.0) == \
        "[############------------] 2/4  ok 1  failed 1  0.20 lines/s  ETA 10s"
    progress.add(_result(2))
    progress.add(_result(3))
    assert progress.render(now=300.0).endswith("4/4  ok 3  failed 1  0.02 lines/s  done")


def test_cancelled_lines_are_counted_apart_from_failed_ones(tmp_path: Path) -> None:
    progress = Progress(total=3, started=100.0)
    for result in (_result(0), _result(1, status="cancelled"), _result(2, status="failed")):
        progress.add(result)
    assert progress.render(now=103.0).endswith(
        "3/3  ok 1  failed 1  cancelled 1  1.00 lines/s  done")
    table = summary_table(_script(tmp_path), {0: _result(0), 1: _result(1, status="cancelled"),
                                              2: _result(2, status="failed")})
    assert table.splitlines()[-1] == \
        "3 lines: 1 succeeded, 1 failed, 1 cancelled, 0 missing; 1.5 s of audio"


def test_progress_off_a_terminal_prints_at_most_once_a_second() -> None:
    out = io.StringIO()
    line = ProgressLine(Progress(total=2), out)
    line.update(force=True)
    line.update()
    line.update()
    line.finish()
    assert out.getvalue().count("\n") == 2 and "\r" not in out.getvalue()


def _script(tmp_path: Path) -> Script:
    return load_script(_write(tmp_path, SCRIPT))


def test_the_summary_has_a_row_per_line_including_failed_and_missing(tmp_path: Path) -> None:
    table = summary_table(_script(tmp_path), {0: _result(0), 1: _result(1, status="failed")})
    rows = table.splitlines()
    assert rows[0].split() == ["#", "voice", "status", "dur_s", "request_id", "object", "/",
                               "error"]
    assert "succeeded  1.50" in rows[1] and "s3://vf/audio/2031/01/01/ep12-0000.wav" in rows[1]
    assert "failed" in rows[2] and "voice_not_found: no voice 'kid'" in rows[2]
    assert "missing" in rows[3] and "no result" in rows[3]
    assert rows[-1] == "3 lines: 1 succeeded, 1 failed, 1 missing; 1.5 s of audio"


def test_job_and_result_one_liners() -> None:
    event = JobCompleted(job_id="ep12", status="succeeded", total=1, clips=[], timeline=[],
                         completed_at="t", duration_s=4.25,
                         subtitles="s3://vf/jobs/ep12/subtitles.srt")
    assert describe_job(event) == ("job ep12 succeeded: 0/1 clips, 4.25 s on the timeline\n"
                                   "subtitles s3://vf/jobs/ep12/subtitles.srt")
    assert result_line(_result(1, status="failed")) == (
        "2031-01-01T00:00:00Z failed    ep12-0001 voice=narrator job=ep12#1/3 "
        "voice_not_found: no voice 'kid'")


def test_script_errors_are_voicefactory_errors_with_their_messages() -> None:
    """Under the root error, they still read as their message alone."""
    from consumers.clients.revisions import RevisionError
    from topics.errors import VoiceFactoryError

    assert issubclass(ScriptError, VoiceFactoryError)
    assert issubclass(RevisionError, VoiceFactoryError)
    assert str(ScriptError("s.yaml: line 1: nope")) == "s.yaml: line 1: nope"


def test_unregistered_voices_exit_2_naming_each_with_its_lines_before_anything_is_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from consumers.clients import jobs

    written: list[str] = []

    class _Store:  # only the narrator is registered
        bucket = "vf"

        def stat(self, key: str) -> object:
            return SimpleNamespace(key=key) if key == "voices/narrator/voice.json" else None

        def put(self, key: str, data: bytes, content_type: str) -> None:
            written.append(key)

    monkeypatch.setattr(jobs, "make_store", lambda _store: _Store())
    lines = [{"voice": "narrator", "text": "One."}, {"voice": "kidd", "text": "Two."},
             {"voice": "narrator", "text": "Three."}, {"voice": "kidd", "text": "Four."},
             {"voice": "villian", "text": "Five."}]
    path = tmp_path / "ep.json"
    path.write_bytes(orjson.dumps({"job_id": "ep13", "lines": lines}))
    assert voicefactory.main(["job", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "2 voices are not registered: 'kidd' on lines 2, 4; 'villian' on line 5" in err
    assert written == []  # no script.json, no request


def test_a_long_list_of_lines_is_shortened() -> None:
    from consumers.clients.jobs import UnknownVoices

    message = str(UnknownVoices({"kid": list(range(1, 14))}))
    assert "'kid' on lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 3 more" in message
    assert message.startswith("1 voice is not registered")


async def test_the_produced_line_says_where_the_lines_went_and_why() -> None:
    from consumers.clients.jobs import _spread
    from consumers.fleet.router import FleetRouter
    from consumers.fleet.sending import lane_sender
    from tests.unit.consumers.fleet.test_sending import NAMES, Producer, request
    from topics.fleet import LaneLoad, WorkerStatus

    router = FleetRouter(partitions=2, wall_ms=lambda: 1_000)
    sender = lane_sender(Producer(), NAMES, "batch", router)  # as `job run` makes it
    assert _spread(sender) == ""  # nothing sent: nothing to say
    for w, shards in (("w0", [0]), ("w1", [1])):
        lanes = {"batch": LaneLoad(partitions=shards, topic_partitions=2, shards=shards,
                                   shard_partitions=2, slots=1)}
        router.apply(WorkerStatus(worker=w, at_ms=1_000, interval_ms=500, lanes=lanes))
    for i in range(6):  # one narrator's lines: its share makes both workers copies
        await sender.send(request(i))
    assert _spread(sender) == ", routed to 2 workers (home 3, copy 3)"
