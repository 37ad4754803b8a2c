"""The console in a real browser: Debian's chromium driven by Playwright, against the real
stack (Kafka, S3 server, `voicefactory gateway`, the real worker, the faust aggregator).

One stack and one browser for the module: topics under a prefix of the module's own, the
worker, the aggregator and the gateway as child processes (so the browser's sync driver owns
this thread), a key in a keys file of its own. Each test opens a fresh browser context (so a
fresh sessionStorage), types the key into the console's form and works the page by keyboard
and clicks as a person would:

    Voices: a 1-second clip's verdict (the failing rule shown, nothing stored), then a good
      reference checked, registered, its reference played, and deleted after a confirm; a
      recording from Chromium's fake microphone sent as WAV and found decodable
    Speak: a line streamed as pcm into Web Audio: > 1 s of samples scheduled and played,
      in pieces (the first scheduled well before the last arrived), the time to first audio
      shown; the take in the history with a download; an mp3 take, whole
    Jobs: a 10-line JSONL script pasted, each line's status shown while it runs, watched
      until it closes `succeeded`, a clip played, its SRT, the zip of its clips and its
      timeline downloaded through the console; a failed line of another job run again,
      alone, as a new job
    Fleet: the worker's lanes from tts.fleet, its profile cache hit ratio and the fleet's,
      a failed line's engine_error in the errors by code, the lag table
    every page: axe-core (vendored, tests/integration/console/vendor) finds no serious or
      critical violation; no horizontal scroll at 360 px wide; the key never in a URL or
      localStorage, nor in any process's log; the whole console works by keyboard alone
Screenshots go to $VF_CONSOLE_SCREENSHOTS (docs/img for docs/console.md) only when it is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from consumers.clients.demo import REFERENCE_TEXT, make_consent, make_reference
from consumers.gateway.keys import SCOPES, add_key
from consumers.settings import (
    GatewaySettings,
    KafkaSettings,
    Secret,
    Settings,
    StoreSettings,
    WorkerSettings,
)
from deploy.local import stack as local
from tests.integration.gateway_harness import free_port
from tests.integration.workers import REPO, worker_env
from topics.admin import admin_client, create_topics

CHROMIUM = "/usr/bin/chromium"
AXE = (Path(__file__).resolve().parent / "vendor" / "axe.min.js").read_text(encoding="utf-8")
SHOTS = os.environ.get("VF_CONSOLE_SCREENSHOTS", "")
PAGES = ("voices", "speak", "jobs", "fleet")
# The real worker with the bench engine (speech-like audio at a set pace), so a stream
# really comes in pieces over time: 0.25 s windows, the first after 100 ms, a real-time
# factor of 0.2 (espeak makes a whole line in one go, faster than a browser can tell).
# A line with the engine's fail marker fails at its first attempt (re-run test).
BENCH_ENGINE = {"VF_ENGINE": "bench", "VF_BENCH_FIRST_CHUNK_MS": "100",
                "VF_BENCH_CHUNK_SECONDS": "0.25", "VF_BENCH_PER_AUDIO_SECOND_MS": "200",
                "VF_MAX_ATTEMPTS": "1"}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not "
                       "installed (make setup installs it)"),
]


@dataclass
class Stack:
    settings: Settings
    url: str
    key: str
    voice: str
    logs: Path


def tails(logs: Path) -> str:
    return "\n".join(f"--- {log.name}\n" + "\n".join(
        log.read_text(errors="replace").splitlines()[-25:]) for log in sorted(logs.glob("*.log")))


def topics(settings: Settings, *, create: bool) -> None:
    """Create (or delete) the module's topics, on a thread of its own: the browser driver
    runs an event loop on this one."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _topics(settings, create)).result()


async def _topics(settings: Settings, create: bool) -> None:
    admin = admin_client(settings.kafka.bootstrap)
    await admin.start()
    try:
        prefix = settings.kafka.topic_prefix
        if create:
            await create_topics(admin, prefix=prefix)
        else:
            ours = [t for t in await admin.list_topics() if t.startswith(prefix)]
            if ours:
                await admin.delete_topics(ours)
    finally:
        await admin.close()


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "voicefactory", *args], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def _wait(what: str, ready: Callable[[], bool], timeout_s: float,
          procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args!r} exited waiting for {what}\n{tails(logs)}"
        with contextlib.suppress(httpx.HTTPError, OSError):
            if ready():
                return
        time.sleep(0.3)
    raise AssertionError(f"{what} not ready in {timeout_s} s\n{tails(logs)}")


@pytest.fixture(scope="module")
def stack(bucket: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console")
    prefix = f"c{uuid.uuid4().hex[:8]}."
    settings = Settings(
        kafka=KafkaSettings(bootstrap=f"127.0.0.1:{local.KAFKA_PORT}", topic_prefix=prefix),
        store=StoreSettings(endpoint=f"http://127.0.0.1:{local.S3_PORT}",
                            access_key=local.S3_ACCESS_KEY,
                            secret_key=Secret(local.S3_SECRET_KEY), bucket=bucket),
        worker=WorkerSettings(group_id=f"vf-synth-{prefix}", instance_id=f"console-{prefix}",
                              metrics_port=0, metrics_host="127.0.0.1",
                              session_timeout_ms=10_000),
        gateway=GatewaySettings(keys_file=str(tmp / "keys"), group_id=f"vf-gateway-{prefix}"))
    topics(settings, create=True)
    key = add_key(settings.gateway.keys_path(), "console", rate=100, streams=4,
                  scopes=SCOPES)  # the console's fleet page is an operator's (admin)
    port, ops_port = free_port(), free_port()
    env = worker_env(settings)
    procs = [
        _spawn(["worker"], {**env, **BENCH_ENGINE}, tmp / "worker.log"),
        _spawn(["aggregator", "--log-format", "text"],
               {**env, "VF_AGGREGATOR_PORT": "-1", "VF_AGGREGATOR_DATADIR": str(tmp / "faust"),
                "VF_JOB_TIMEOUT_SECONDS": "120"}, tmp / "aggregator.log"),
        _spawn(["gateway", "--log-format", "text"],
               {**env, "VF_GATEWAY_PORT": str(port), "VF_GATEWAY_OPS_PORT": str(ops_port),
                "VF_GATEWAY_HOST": "127.0.0.1"},
               tmp / "gateway.log")]
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {key}"}
    try:
        _wait("gateway", lambda: httpx.get(f"http://127.0.0.1:{ops_port}/readyz").status_code
              == 200, 60, procs, tmp)
        reference = make_reference(tmp / "narrator.wav")
        consent = make_consent(tmp / "narrator-consent.wav")
        added = httpx.post(url + "/v1/voices", headers=auth, timeout=60,
                           files={"reference": ("narrator.wav", reference),
                                  "consent_recording": ("consent.wav", consent)},
                           data={"voice_id": "narrator-1", "transcript": REFERENCE_TEXT,
                                 "language": "en"})
        assert added.status_code == 201, added.text
        # One line through the whole chain: the worker is up and holds the voice's profile.
        _wait("worker", lambda: httpx.post(url + "/v1/audio/speech", headers=auth, timeout=90,
                                           json={"model": "tts-1", "voice": "narrator-1",
                                                 "input": "Warm up.", "response_format": "pcm"}
                                           ).status_code == 200, 120, procs, tmp)
        _wait("aggregator", lambda: "aggregating" in (tmp / "aggregator.log").read_text(
            errors="replace"), 120, procs, tmp)
        yield Stack(settings, url, key, "narrator-1", tmp)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        topics(settings, create=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--autoplay-policy=no-user-gesture-required",
            # a microphone for MediaRecorder: Chromium's fake device (a beep), no prompt
            "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"])
        yield chromium
        chromium.close()


ERRORS: dict[int, list[str]] = {}  # id(page) -> its script errors
OPENED: list[BrowserContext] = []  # this test's contexts, closed after it


@pytest.fixture(autouse=True)
def _close_contexts() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def errors_of(page: Page) -> list[str]:
    """Uncaught exceptions and console errors, less the browser's own note on each 4xx
    answer (the console meets 422s on purpose) and the favicon it asks for."""
    return [e for e in ERRORS.get(id(page), []) if "Failed to load resource" not in e]


def open_console(browser: Browser, stack: Stack, page_name: str, *,
                 width: int = 1100) -> Page:
    """A fresh context: the key typed into the form (and Enter), then the page by its link."""
    context = browser.new_context(viewport={"width": width, "height": 900},
                                  accept_downloads=True)
    OPENED.append(context)
    page = context.new_page()
    errors = ERRORS.setdefault(id(page), [])
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(stack.url + "/console/")
    page.get_by_label("API key").fill(stack.key)
    page.get_by_label("API key").press("Enter")
    page.get_by_role("link", name=page_name.capitalize(), exact=True).click()
    expect(page.locator("main")).to_have_attribute("data-page", page_name)
    return page


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"console-{name}.png"), full_page=True)


def serious_violations(page: Page) -> list[dict[str, object]]:
    """axe-core's serious and critical findings on the page as it is now. The script goes in
    through the driver (evaluate), which the page's CSP does not govern: the console itself
    keeps its policy while it is checked."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE)
    found: list[dict[str, object]] = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' '))}))")
    return [v for v in found if v["impact"] in ("serious", "critical")]


def key_stays_put(page: Page, key: str) -> None:
    assert key not in page.url
    assert page.evaluate("() => Object.keys(localStorage).length") == 0
    assert page.evaluate("() => sessionStorage.getItem('vf-key')") == key


def test_voices_verdict_register_play_and_delete(browser: Browser,
                                                stack: Stack) -> None:
    page = open_console(browser, stack, "voices")
    expect(page.get_by_role("cell", name="narrator-1", exact=True)).to_be_visible()
    short = stack.logs / "short.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(short), "Hi there."], check=True)
    page.set_input_files("#v-file", str(short))
    page.fill("#v-id", "console-voice")
    page.get_by_role("button", name="Check reference").click()
    verdict = page.locator("#v-verdict")
    expect(verdict.get_by_role("alert")).to_contain_text("reference too short", timeout=30_000)
    failing = verdict.locator("tr", has=page.locator("td .bad"))
    expect(failing).to_have_count(1)
    expect(failing.locator("td").first).to_have_text("speech duration")
    expect(page.get_by_role("button", name="Register voice")).to_be_disabled()
    shot(page, "voices-verdict")
    assert serious_violations(page) == []
    assert httpx.get(f"{stack.url}/v1/voices/console-voice", headers={
        "Authorization": f"Bearer {stack.key}"}).status_code == 404  # nothing stored

    page.set_input_files("#v-file", str(stack.logs / "narrator.wav"))
    page.fill("#v-transcript", REFERENCE_TEXT)
    page.set_input_files("#v-consent", str(stack.logs / "narrator-consent.wav"))
    page.fill("#v-speaker", "Console Narrator")
    page.get_by_role("button", name="Check reference").click()
    expect(verdict).to_contain_text("Every rule passes", timeout=30_000)
    expect(verdict.locator("td .bad")).to_have_count(0)
    page.get_by_role("button", name="Register voice").click()
    expect(page.locator("#status")).to_have_text("Voice console-voice registered.",
                                                 timeout=30_000)
    expect(page.get_by_role("cell", name="console-voice", exact=True)).to_be_visible()
    page.get_by_role("button", name="Play reference of console-voice").click()
    audio = page.get_by_label("console-voice's reference")
    expect(audio).to_be_visible()
    page.wait_for_function("() => document.querySelector('#v-player audio')?.duration > 3")
    shot(page, "voices")

    page.get_by_role("button", name="Delete console-voice").click()
    confirm = page.get_by_role("button", name="Yes, delete")
    expect(confirm).to_be_focused()  # the keyboard lands on the question
    page.keyboard.press("Enter")
    expect(page.locator("#status")).to_have_text("Voice console-voice deleted.")
    expect(page.get_by_role("cell", name="console-voice", exact=True)).to_have_count(0)
    key_stays_put(page, stack.key)
    assert errors_of(page) == []


def test_a_recording_is_sent_as_wav_and_checked(browser: Browser, stack: Stack) -> None:
    page = open_console(browser, stack, "voices")
    page.context.grant_permissions(["microphone"])
    page.get_by_role("button", name="Record", exact=True).click()
    stop = page.get_by_role("button", name="Stop recording")
    expect(stop).to_be_visible()
    page.wait_for_timeout(2500)
    stop.click()
    expect(page.locator("#v-record-note")).to_contain_text("Recorded", timeout=10_000)
    page.get_by_role("button", name="Check reference").click()
    rows = page.locator("#v-verdict tbody tr")
    expect(rows.first).to_be_visible(timeout=30_000)
    decodable = page.locator("#v-verdict tr", has=page.get_by_role("cell", name="decodable"))
    expect(decodable).to_contain_text("pass")  # WebM from the browser, WAV on the wire
    assert errors_of(page) == []


def test_speak_streams_into_web_audio_and_shows_the_first_audio_time(
        browser: Browser, stack: Stack) -> None:
    page = open_console(browser, stack, "speak")
    expect(page.get_by_label("Voice", exact=True)).to_have_value(stack.voice)
    page.get_by_label("Text", exact=True).fill(
        "The console plays this sentence while the worker is still making it, one chunk at "
        "a time.")
    page.get_by_label("Format").select_option("pcm")
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.locator("#s-first")).to_have_text(re.compile(r"^\d+ ms$"), timeout=60_000)
    page.wait_for_function("() => window.vfAudio.samples > 24000", timeout=60_000)
    page.wait_for_function("() => window.vfAudio.played > 24000", timeout=30_000)
    counts = page.evaluate("() => window.vfAudio")
    # Played as it came, not as one file: many pieces, the first well before the last.
    assert counts["chunks"] >= 4, counts
    assert 0 < counts["firstAudioMs"] < counts["lastAudioMs"] - 300, counts
    take = page.locator("#s-history li").first
    expect(take).to_contain_text("first audio after")
    with page.expect_download() as download:
        take.get_by_role("link", name=re.compile("Download take-1.wav")).click()
    data = Path(download.value.path()).read_bytes()
    assert data[:4] == b"RIFF" and (len(data) - 44) / 2 / 24_000 > 1.0
    # Another format comes whole, then plays; the take downloads as that format.
    page.get_by_label("Format").select_option("mp3")
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.locator("#s-history li")).to_have_count(2, timeout=60_000)
    expect(page.locator("#s-history li").first).to_contain_text(re.compile(r"mp3, [1-9][0-9.]* s"))
    with page.expect_download() as download:
        page.get_by_role("link", name="Download take-2.mp3").click()
    mp3 = Path(download.value.path()).read_bytes()
    assert mp3[:3] == b"ID3" or mp3[0] == 0xFF, mp3[:8]
    shot(page, "speak")
    assert serious_violations(page) == []
    key_stays_put(page, stack.key)
    assert errors_of(page) == []


def test_a_10_line_script_runs_to_done_and_its_srt_downloads(
        browser: Browser, stack: Stack) -> None:
    page = open_console(browser, stack, "jobs")
    job_id = f"console-{uuid.uuid4().hex[:6]}"
    lines = [f"Line {n} of the console's script." for n in range(1, 11)]
    page.get_by_label("Job ID").fill(job_id)
    page.get_by_label("Script", exact=True).fill("\n".join(
        f'{{"voice": "{stack.voice}", "text": "{text}"}}' for text in lines))
    # Every running view the page shows, as it shows it: its lines' status cells and the
    # count it says were answered (a poll each second, the job closes within seconds).
    page.evaluate("""() => { window.runningViews = [];
      new MutationObserver(() => {
        const h = document.querySelector('#j-view h2');
        if (!h || !h.textContent.endsWith(': running')) return;
        window.runningViews.push({
          state: document.querySelector('#j-state').textContent,
          cells: [...document.querySelectorAll('#j-view tbody tr')].map(
            (r) => r.lastElementChild.textContent)});
      }).observe(document.querySelector('main'), { childList: true, subtree: true }); }""")
    page.get_by_role("button", name="Submit job").click()
    heading = page.locator("#j-view h2")
    expect(heading).to_have_text(f"Job {job_id}: succeeded", timeout=120_000)
    running = page.evaluate("() => window.runningViews")
    assert running, "the job closed before the page showed it running"
    for view in running:  # every line listed, each answered one with its own status
        assert len(view["cells"]) == 10 and set(view["cells"]) <= {"waiting", "succeeded"}
        answered = int(view["state"].split(" of ")[0])
        assert view["cells"].count("succeeded") == answered, view
    assert any("succeeded" in view["cells"] for view in running), running
    expect(page.locator("#j-view tbody tr")).to_have_count(10)
    expect(page.locator("#j-view tbody .ok")).to_have_count(10)
    page.get_by_role("button", name="Play line 3").click()
    page.wait_for_function("() => document.querySelector('#j-player audio')?.duration > 0.5")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download subtitles (SRT)").click()
    assert download.value.suggested_filename == f"{job_id}.srt"
    srt = Path(download.value.path()).read_text(encoding="utf-8")
    assert [t for t in lines if t in srt] == lines and "-->" in srt
    with page.expect_download() as download:
        page.get_by_role("button", name="Download clips (zip)").click()
    with zipfile.ZipFile(download.value.path()) as archive:
        names = archive.namelist()
        assert len(names) == 10 and names[0] == f"0001-{job_id}-0000.wav", names
        assert all(archive.read(n)[:4] == b"RIFF" for n in names)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download timeline (JSON)").click()
    spans = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))["timeline"]
    assert [s["index"] for s in spans] == list(range(10))
    assert all(a["end_s"] <= b["start_s"] for a, b in itertools.pairwise(spans))
    expect(page.get_by_role("button", name="Re-run failed lines")).to_be_disabled()
    shot(page, "jobs")
    assert serious_violations(page) == []
    assert errors_of(page) == []


def test_a_failed_line_is_run_again_as_the_jobs_next_version(browser: Browser,
                                                              stack: Stack) -> None:
    page = open_console(browser, stack, "jobs")
    job_id = f"console-{uuid.uuid4().hex[:6]}"
    page.get_by_label("Script", exact=True).fill(json.dumps({"job_id": job_id, "lines": [
        {"voice": stack.voice, "text": "This line works."},
        {"voice": stack.voice, "text": "This one fails [[bench:fail]]", "language": "en"},
        {"voice": stack.voice, "text": "So does this one."}]}))
    page.get_by_role("button", name="Submit job").click()
    heading = page.locator("#j-view h2")
    expect(heading).to_have_text(f"Job {job_id}: partial", timeout=120_000)
    expect(page.locator("#j-view tbody .bad")).to_have_count(1)
    page.get_by_role("button", name="Re-run 1 failed line(s)").click()
    expect(page.locator("#status")).to_have_text(
        f"Job {job_id} version 2 queued: line(s) 2 again.")
    # POST /v1/jobs/{id}/rerun: version 2 of the same job, which the page follows to its end
    expect(heading).to_have_text(f"Job {job_id} v2: partial", timeout=120_000)
    rows = page.locator("#j-view tbody tr")
    expect(rows).to_have_count(3)  # lines 1 and 3 carried, line 2 produced again
    expect(page.locator("#j-view tbody .bad")).to_have_count(1)
    expect(rows.nth(1)).to_contain_text("This one fails")
    job = httpx.get(f"{stack.url}/v1/jobs/{job_id}",
                    headers={"Authorization": f"Bearer {stack.key}"}).json()
    assert job["version"] == 2 and job["status"] == "partial"
    assert [(c["request_id"], c.get("version") or 1) for c in job["clips"]] == [
        (f"{job_id}-0000", 1), (f"{job_id}-v2-0001", 2), (f"{job_id}-0002", 1)]
    assert errors_of(page) == []


def test_fleet_shows_the_worker_and_the_lag(browser: Browser,
                                            stack: Stack) -> None:
    # A line the bench engine fails (engine_error), answered before the page opens; the
    # stack's warm-up line made the worker look its voice's profile up.
    failed = httpx.post(stack.url + "/v1/audio/speech", timeout=60,
                        headers={"Authorization": f"Bearer {stack.key}"},
                        json={"model": "tts-1", "voice": stack.voice, "response_format": "pcm",
                              "input": "This one fails [[bench:fail]]"})
    assert failed.status_code >= 400, failed.text
    page = open_console(browser, stack, "fleet")
    worker = stack.settings.worker.instance_id
    row = page.locator("tr", has=page.get_by_role("cell", name=worker, exact=True))
    expect(row).to_contain_text("live")
    expect(row).to_contain_text("slot(s)")
    expect(row).to_contain_text(re.compile(r"\d+\.\d% of [1-9]\d*"), timeout=10_000)
    expect(page.locator("#f-cache")).to_contain_text(re.compile(r"hit ratio: \d+\.\d% of"))
    codes = page.get_by_role("table", name=re.compile("by error code"))
    expect(codes.locator("tr", has=page.get_by_role("cell", name="engine_error", exact=True))
           ).to_contain_text(re.compile(r"engine_error\s*[1-9]"), timeout=10_000)
    expect(page.locator("#f-lag")).to_contain_text("request(s) behind", timeout=10_000)
    # the speech requests this replica produced, by why the router chose their worker
    routes = page.get_by_role("table", name=re.compile("why the fleet router chose"))
    expect(routes).to_contain_text(re.compile(r"interactive\s*(home|unrouted)\s*[1-9]"))
    shot(page, "fleet")
    assert serious_violations(page) == []
    assert errors_of(page) == []


@pytest.mark.parametrize("name", PAGES)
def test_no_serious_accessibility_violation_and_readable_at_360px(
        browser: Browser, stack: Stack, name: str) -> None:
    page = open_console(browser, stack, name, width=360)
    assert serious_violations(page) == []
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{name} scrolls sideways by {overflow} px at 360 px"
    if name == "voices":
        shot(page, "narrow")


def test_the_console_works_by_keyboard_alone(browser: Browser,
                                             stack: Stack) -> None:
    context = browser.new_context()
    OPENED.append(context)
    page = context.new_page()
    page.goto(stack.url + "/console/")
    expect(page.get_by_label("API key")).to_be_focused()  # no key yet: the form has focus
    page.keyboard.type(stack.key)
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_have_attribute("data-page", "voices")
    page.keyboard.press("Shift+Tab")  # from <main> back through the header to a nav link
    for _ in range(10):
        if page.evaluate("() => document.activeElement.textContent") == "Jobs":
            break
        page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_have_attribute("data-page", "jobs")
    expect(page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()
    key_stays_put(page, stack.key)


def test_a_wrong_key_says_so_and_is_forgotten_on_request(browser: Browser,
                                                         stack: Stack) -> None:
    context = browser.new_context()
    OPENED.append(context)
    page = context.new_page()
    page.goto(stack.url + "/console/#/voices")
    page.get_by_label("API key").fill("vf-not-a-key")
    page.get_by_role("button", name="Use key").click()
    expect(page.locator("#voice-list")).to_contain_text("Voices not loaded: invalid API key")
    page.get_by_role("button", name="Forget key").click()
    expect(page.get_by_label("API key")).to_be_focused()
    assert page.evaluate("() => sessionStorage.length") == 0
    assert "vf-not-a-key" not in page.url


def test_the_key_reached_no_log_line(browser: Browser, stack: Stack) -> None:
    """Last in the module: after every page used it, the key (and the wrong one tried
    above) is in no process's log."""
    page = open_console(browser, stack, "fleet")  # one more use, in case this runs alone
    expect(page.locator("#f-lag")).to_be_visible()
    logs = sorted(stack.logs.glob("*.log"))
    assert {log.name for log in logs} == {"worker.log", "aggregator.log", "gateway.log"}
    for log in logs:
        text = log.read_text(errors="replace")
        assert stack.key not in text and "vf-not-a-key" not in text, log.name
