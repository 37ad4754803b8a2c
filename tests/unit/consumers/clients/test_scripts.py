"""Script files -> checked jobs: one request per line, the manifest, errors that name the file,
line and rule (no servers)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from consumers.clients.scripts import ScriptError, load_script, parse_script
from topics.events import JobRef

SCRIPT = """\
job_id: ep12
gap_ms: 250
language: en
lines:
  - voice: narrator
    text: The factory never sleeps.
  - voice: grandma
    text: 吃火锅咯！
    language: zh
    instruct: 用四川话说这句话
  - voice: kid
    text: Can we go now?
    format: mp3
    metadata: {scene: 3}
"""


def _write(tmp_path: Path, text: str, name: str = "script.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_script_becomes_one_request_per_line_with_its_job_reference(tmp_path: Path) -> None:
    script = load_script(_write(tmp_path, SCRIPT))
    assert script.job_id == "ep12"
    assert [r.request_id for r in script.requests] == ["ep12-0000", "ep12-0001", "ep12-0002"]
    assert [r.job for r in script.requests] == [JobRef(id="ep12", index=i, total=3)
                                                for i in range(3)]
    assert [r.language for r in script.requests] == ["en", "zh", "en"]  # top-level default
    assert [r.format for r in script.requests] == ["wav", "wav", "mp3"]
    assert script.requests[1].instruct == "用四川话说这句话"
    assert script.requests[2].metadata == {"scene": 3}
    manifest = script.manifest
    assert manifest.gap_ms == 250 and not manifest.concat and manifest.total == 3
    assert [(m.index, m.text) for m in manifest.lines][1] == (1, "吃火锅咯！")


def test_json_scripts_and_the_concat_flag(tmp_path: Path) -> None:
    doc = {"job_id": "j-1", "concat": False, "track_format": "flac",
           "lines": [{"voice": "a", "text": "hi"}]}
    path = _write(tmp_path, orjson.dumps(doc).decode(), "s.json")
    assert not load_script(path).manifest.concat
    forced = load_script(path, concat=True).manifest
    assert forced.concat and forced.track_format == "flac"


@pytest.mark.parametrize(("doc", "message"), [
    ([1, 2], "expected a mapping with job_id and lines"),
    ({"lines": [{"voice": "a", "text": "x"}]}, "job_id is required"),
    ({"job_id": "../etc", "lines": [{"voice": "a", "text": "x"}]}, "outside"),
    ({"job_id": "a..b", "lines": [{"voice": "a", "text": "x"}]}, "contains '..'"),
    ({"job_id": "j" * 124, "lines": [{"voice": "a", "text": "x"}]}, "limit 123"),
    ({"job_id": "j", "lines": []}, "lines must be a non-empty list"),
    ({"job_id": "j", "line": []}, "unknown keys ['line']"),
    ({"job_id": "j", "lines": [{"voice": "a"}]}, "line 1: voice and text are required"),
    ({"job_id": "j", "lines": [{"voice": "a", "text": "x"}, {"voice": "b", "txt": "y"}]},
     "line 2: unknown keys ['txt']"),
    ({"job_id": "j", "lines": [{"voice": "a", "text": "x" * 2001}]},
     "line 1: text has 2,001 characters"),
    ({"job_id": "j", "lines": [{"voice": "a", "text": "x", "format": "aac"}]}, "line 1: "),
    ({"job_id": "j", "gap_ms": -5, "lines": [{"voice": "a", "text": "x"}]},
     "gap_ms must be a whole number >= 0"),
    ({"job_id": "j", "track_format": "ogg", "lines": [{"voice": "a", "text": "x"}]},
     "track_format 'ogg'"),
])
def test_bad_scripts_say_which_line_breaks_which_rule(doc: object, message: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(doc, source="s.yaml")
    assert str(info.value).startswith("s.yaml")
    assert message in str(info.value)


def test_unreadable_files_are_script_errors(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="not valid YAML"):
        load_script(_write(tmp_path, "job_id: [unclosed"))
    with pytest.raises(ScriptError, match="No such file"):
        load_script(tmp_path / "nope.yaml")


def test_the_video_factory_example_script_is_a_valid_job() -> None:
    example = Path(__file__).resolve().parents[4] / "docs/examples/video-factory/episode-12.yaml"
    script = load_script(example)
    assert script.manifest.concat and script.manifest.gap_ms == 350
    assert {r.voice_id for r in script.requests} == {"narrator", "mei", "tom"}
    assert {r.language for r in script.requests} == {"zh", "en"}
