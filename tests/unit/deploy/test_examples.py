"""The docs' event examples against the published schemas with ajv (deploy/tools/examplecheck):
the checkout passes, and a copy of the docs broken on purpose fails, naming the file, the
line, the schema and ajv's error."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.checks import runner
from deploy.tools import install
from tests.unit.deploy.conftest import ROOT, edit

pytestmark = pytest.mark.timeout(600)  # a cold cache runs npm ci first


@pytest.fixture
def docs(tmp_path: Path, tools: None) -> runner.Layout:
    """A copy of what the check reads: README.md, docs/ and topics/schemas/."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("img"))
    shutil.copytree(ROOT / "topics" / "schemas", root / "topics" / "schemas")
    shutil.copyfile(ROOT / "README.md", root / "README.md")
    return runner.Layout(root=root)


def check(root: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH (make setup installs it)"
    return subprocess.run([node, str(install.EXAMPLECHECK.source / "check.mjs"), "--root",
                           str(root), "--modules", str(install.EXAMPLECHECK.modules),
                           *map(str, files)],
                          capture_output=True, text=True, check=False, timeout=120)


def test_every_docs_example_validates_with_ajv(tools: None) -> None:
    proc = check(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = {line.split(":")[0]: line for line in proc.stdout.splitlines()[:-1]}
    # Every schema has an example, and the contract page holds one of each.
    for schema in sorted((ROOT / "topics" / "schemas").glob("*.json")):
        assert f"{schema.stem} x" in counts["docs/contract.md"], proc.stdout
    assert proc.stdout.splitlines()[-1].endswith(": 0 problems")


def test_a_broken_example_is_named_with_ajvs_error(docs: runner.Layout) -> None:
    contract = docs.root / "docs" / "contract.md"
    edit(contract, '"speed": 1.1,', '"speed": 3.5,')
    line = contract.read_text("utf-8").splitlines().index('  "speed": 3.5,') + 1
    problems = runner.check_examples(docs)
    assert len(problems) == 1, problems
    [problem] = problems
    # The block's opening fence, the heading it is under, the schema and ajv's words.
    assert problem.startswith("docs/contract.md:"), problem
    fence = int(problem.split(":")[1].split(" ")[0])
    assert 0 < line - fence < 20
    assert "Request (`tts.request.v1`" in problem
    assert "tts.request.v1: /speed must be <= 2" in problem


def test_an_example_inside_a_shell_command_is_checked(docs: runner.Layout) -> None:
    edit(docs.root / "docs" / "contract.md",
         '"voice_id":"narrator-01","text":"The factory never sleeps."}\' | kcat',
         '"voice_id":"narrator/01","text":"The factory never sleeps."}\' | kcat')
    [problem] = runner.check_examples(docs)
    assert "tts.request.v1: /voice_id must match pattern" in problem, problem


def test_an_unmarked_request_without_schema_in_code_is_refused(docs: runner.Layout) -> None:
    readme = docs.root / "README.md"
    edit(readme, "<!-- example: tts.request.v1 -->\n```sh", "```sh")
    [problem] = runner.check_examples(docs)
    assert problem.startswith("README.md:") and "every required field of tts.request.v1" in problem


def test_markers_classify_json_blocks(tmp_path: Path, tools: None) -> None:
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "# Page", "",
        "<!-- not-an-event -->", "```json", '{"not": "an event"}', "```", "",
        "<!-- invalid-example: tts.request.v1 -->", "```json",
        '{"schema": "tts.request.v1", "request_id": "a/b", "voice_id": "v", "text": "x"}', "```",
        "",
        "## Unmarked", "```json", '{"id": 1}', "```", "",
        "## Wrongly marked invalid", "<!-- invalid-example: tts.control.v1 -->", "```json",
        '{"schema": "tts.control.v1", "action": "cancel", "job_id": "ep12"}', "```", "",
        "## Marker and schema disagree", "<!-- example: tts.job.v1 -->", "```json",
        '{"schema": "tts.control.v1", "action": "cancel", "job_id": "ep12"}', "```", "",
        "## Unknown schema", "```json", '{"schema": "tts.nothing.v1"}', "```", ""]),
        encoding="utf-8")
    proc = check(ROOT, page)
    assert proc.returncode == 1
    problems = proc.stderr.splitlines()
    assert len(problems) == 4, proc.stderr
    assert "page.md:14 (Page > Unmarked): ```json block has no \"schema\" field" in problems[0]
    assert "marked invalid-example but validates against tts.control.v1" in problems[1]
    assert 'marked tts.job.v1 but its "schema" is "tts.control.v1"' in problems[2]
    assert "names schema tts.nothing.v1, which topics/schemas/ does not have" in problems[3]


def test_asyncapi_message_examples_are_checked(tmp_path: Path, tools: None) -> None:
    spec = tmp_path / "asyncapi.yaml"
    request = ROOT / "topics" / "schemas" / "tts.request.v1.json"
    spec.write_text(json.dumps({
        "asyncapi": "3.0.0",
        "components": {
            "messages": {"synthesisRequest": {
                "name": "tts.request.v1",
                "payload": {"schemaFormat": "application/schema+json;version=draft-2020-12",
                            "schema": {"$ref": str(request)}},
                "headers": {"$ref": "#/components/schemas/requestHeaders"},
                "examples": [
                    {"name": "fine", "payload": {"request_id": "r-1", "voice_id": "v",
                                                 "text": "hi"}},
                    {"name": "aac", "payload": {"request_id": "r-1", "voice_id": "v",
                                                "text": "hi", "format": "aac"},
                     "headers": {"vf-reply-partition": "seven"}},
                ]}},
            "schemas": {"requestHeaders": {"type": "object", "properties": {
                "vf-reply-partition": {"type": "string", "pattern": "^[0-9]+$"}}}},
        }}), encoding="utf-8")
    proc = check(ROOT, spec)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"{spec}: 2 examples (tts.request.v1 x2)"), proc.stdout
    assert proc.stderr.splitlines() == [
        f"{spec}:components.messages.synthesisRequest.examples[1] (aac): tts.request.v1: "
        '/format must be equal to one of the allowed values ("flac", "mp3", "opus", "wav")',
        f"{spec}:components.messages.synthesisRequest.examples[1] (aac): headers: "
        '/vf-reply-partition must match pattern "^[0-9]+$"']


def test_a_schema_ajv_rejects_in_strict_mode_fails_the_check(docs: runner.Layout) -> None:
    path = docs.root / "topics" / "schemas" / "tts.voice.v1.json"
    schema = json.loads(path.read_text("utf-8"))
    schema["properties"]["voice_id"]["maxLenght"] = 64  # a typo strict mode catches
    path.write_text(json.dumps(schema), encoding="utf-8")
    problems = runner.check_examples(docs)
    assert any("tts.voice.v1.json: does not compile with ajv (strict)" in p
               and "maxLenght" in p for p in problems), problems
    # Its examples then have no schema to meet, which is a problem too.
    assert any("no example of tts.voice.v1" in p or "tts.voice.v1, which" in p
               for p in problems), problems


def test_a_missing_node_package_names_the_install_command(
        docs: runner.Layout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VF_CACHE_DIR", str(tmp_path / "empty-cache"))
    [outcome] = runner.run_all(docs, ["examples"])
    assert outcome.problems == [
        f"{install.EXAMPLECHECK.modules} is not installed: run `python -m deploy.tools.install`"]


def test_an_example_indented_in_a_list_item_is_found(tmp_path: Path, tools: None) -> None:
    page = tmp_path / "steps.md"
    page.write_text("\n".join([
        "1. Cancel the job:", "", "   ```json",
        '   {"schema": "tts.control.v1", "action": "cancel", "job_id": "ep/12"}', "   ```", ""]),
        encoding="utf-8")
    proc = check(ROOT, page)
    assert proc.returncode == 1
    [problem] = proc.stderr.splitlines()
    assert problem.startswith(f"{page}:3: tts.control.v1: /job_id must match pattern "), problem
    assert "steps.md: 1 example (tts.control.v1 x1)" in proc.stdout
