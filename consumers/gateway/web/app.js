// The VoiceFactory console: one ES module, no framework, nothing fetched from another origin.
//
//   key form -> sessionStorage "vf-key" (this tab only) -> api(): fetch with
//     `Authorization: Bearer` (the key is never put in a URL, localStorage or the console log)
//   location.hash (#/voices, #/speak, #/jobs, #/fleet) -> render(page) into <main>
//   Voices: GET /v1/voices; add = POST /v1/voices?dry_run=1 (the verdict table, nothing
//     stored) -> POST /v1/voices; play = GET /v1/voices/{id}/reference; delete after a confirm
//   Speak: POST /v1/audio/speech, pcm + stream_format audio -> each chunk scheduled on Web
//     Audio as it arrives (window.vfAudio counts the samples); other formats: the whole file
//   Jobs: POST /v1/jobs -> GET /v1/jobs/{id} every second until it is closed -> clips and SRT
//   Fleet: GET /v1/fleet every 2 s while the page is shown
// Pages are built with DOM calls (text nodes only): nothing from the API becomes markup.

const KEY = "vf-key";
const RATE = 24000; // pcm answers: 24 kHz s16le mono
const main = document.getElementById("main");
const statusLine = document.getElementById("status");
let timer = null; // the page's polling timer, cleared on every page change
let shown = 0; // page changes so far: a page still loading when the next one came stops

// -- helpers -----------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function say(message, isError = false) {
  statusLine.textContent = message;
  statusLine.classList.toggle("error", isError);
}

function field(label, control, hint) {
  const id = control.id;
  const hintNode = hint ? el("span", { id: `${id}-hint`, class: "note" }, hint) : null;
  if (hint) control.setAttribute("aria-describedby", `${id}-hint`);
  return el("div", { class: "field" }, el("label", { for: id }, label), control, hintNode);
}

function table(caption, headers, rows) {
  // A wrapper that scrolls on a narrow screen: focusable, so the keyboard can scroll it too.
  return el("div", { class: "scroll", tabindex: "0", role: "region", "aria-label": caption },
    el("table", {},
    el("caption", { class: "note" }, caption),
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c)))))));
}

function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// -- the key and the API -----------------------------------------------------------------

function key() { return sessionStorage.getItem(KEY) || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(path, options = {}) {
  if (!key()) throw new ApiError(401, { error: { message: "enter an API key first" } });
  const headers = new Headers(options.headers || {});
  headers.set("Authorization", `Bearer ${key()}`);
  const response = await fetch(path, { ...options, headers, credentials: "omit" });
  if (!response.ok) {
    let body = null;
    try { body = await response.json(); } catch { body = null; }
    throw new ApiError(response.status, body);
  }
  return response;
}

async function apiJson(path, options) { return (await api(path, options)).json(); }

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("api-key");
  if (input.value.trim()) sessionStorage.setItem(KEY, input.value.trim());
  input.value = "";
  say(key() ? "Key set for this tab." : "No key entered.");
  route();
});
document.getElementById("key-forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  say("Key forgotten.");
  route();
});

// -- Voices --------------------------------------------------------------------------------

function verdictTable(checks) {
  return table("Reference checks, rule by rule", ["rule", "verdict", "measured", "limit", "problem"],
    checks.map((c) => [c.rule,
      el("span", { class: c.ok ? "ok" : (c.advisory ? "advisory" : "bad") },
        c.ok ? "pass" : (c.advisory ? "advisory" : "fail")),
      c.measured ?? "", c.limit ?? "", c.problem ?? ""]));
}

// A browser records WebM/Opus (or MP4), which the reference checks do not all decode: the
// recording is decoded here and sent as 16-bit mono WAV at the recording's own rate.
async function recordingAsWav(blob) {
  const ctx = new AudioContext();
  try {
    const audio = await ctx.decodeAudioData(await blob.arrayBuffer());
    const samples = audio.getChannelData(0);
    const ints = new Int16Array(samples.length);
    for (let i = 0; i < samples.length; i++) {
      ints[i] = Math.max(-32768, Math.min(32767, Math.round(samples[i] * 32767)));
    }
    const file = new File([wavFile(ints.buffer, audio.sampleRate)], "recording.wav",
      { type: "audio/wav" });
    file.seconds = audio.duration;
    return file;
  } finally { ctx.close(); }
}

function voiceForm(refresh) {
  const file = el("input", { id: "v-file", type: "file", accept: "audio/*" });
  const id = el("input", { id: "v-id", type: "text", autocomplete: "off" });
  const transcript = el("textarea", { id: "v-transcript", rows: 2 });
  const language = el("input", { id: "v-language", type: "text", placeholder: "en" });
  const consent = el("input", { id: "v-consent", type: "file", accept: "audio/*" });
  const speaker = el("input", { id: "v-speaker", type: "text", autocomplete: "off" });
  const verdict = el("div", { id: "v-verdict", "aria-live": "polite" });
  const register = el("button", { type: "button", id: "v-register", disabled: true,
    onclick: () => add() }, "Register voice");
  let recorded = null;
  const record = el("button", { type: "button", class: "plain", id: "v-record" }, "Record");
  const recordNote = el("span", { class: "note", id: "v-record-note", "aria-live": "polite" });

  function body() {
    const form = new FormData();
    const chosen = recorded || file.files[0];
    if (!chosen) throw new ApiError(400, { error: { message: "choose or record a reference" } });
    form.append("reference", chosen, chosen.name || "recording.wav");
    for (const [name, input] of [["voice_id", id], ["transcript", transcript],
      ["language", language], ["consent_speaker", speaker]]) {
      if (input.value.trim()) form.append(name, input.value.trim());
    }
    // The speaker's consent (docs/voices.md): checked against the reference on registration.
    if (consent.files[0]) form.append("consent_recording", consent.files[0], consent.files[0].name);
    return form;
  }

  async function check() {
    register.disabled = true;
    verdict.replaceChildren(el("p", {}, "Checking the reference..."));
    try {
      const answer = await apiJson("/v1/voices?dry_run=1", { method: "POST", body: body() });
      verdict.replaceChildren(el("p", { class: "ok" }, "Every rule passes: nothing is stored yet."),
        verdictTable(answer.checks));
      register.disabled = false;
    } catch (err) {
      const checks = err.body && err.body.checks;
      verdict.replaceChildren(el("p", { class: "bad", role: "alert" },
        `Not accepted: ${err.message}`), checks ? verdictTable(checks) : "");
    }
  }

  async function add() {
    register.disabled = true;
    try {
      const voice = await apiJson("/v1/voices", { method: "POST", body: body() });
      say(`Voice ${voice.id} registered.`);
      verdict.replaceChildren(el("p", { class: "ok" }, `Registered as ${voice.id}.`));
      refresh();
    } catch (err) { say(`Not registered: ${err.message}`, true); }
  }

  if (window.MediaRecorder && navigator.mediaDevices) {
    let recorder = null;
    record.addEventListener("click", async () => {
      if (recorder && recorder.state === "recording") { recorder.stop(); return; }
      try {
        const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
        const parts = [];
        recorder = new MediaRecorder(stream);
        recorder.addEventListener("dataavailable", (e) => parts.push(e.data));
        recorder.addEventListener("stop", async () => {
          stream.getTracks().forEach((t) => t.stop());
          try {
            recorded = await recordingAsWav(new Blob(parts, { type: recorder.mimeType }));
            record.textContent = "Record again";
            recordNote.textContent = `Recorded ${recorded.seconds.toFixed(1)} s: it replaces the file.`;
            register.disabled = true;
          } catch (err) { recordNote.textContent = `Recording not decoded: ${err.message}`; }
        });
        recorder.start();
        record.textContent = "Stop recording";
        recordNote.textContent = "Recording... read the transcript aloud.";
      } catch (err) { recordNote.textContent = `No microphone: ${err.message}`; }
    });
  } else { record.disabled = true; recordNote.textContent = "Recording is not available here."; }
  file.addEventListener("change", () => { recorded = null; register.disabled = true; });

  return el("form", { class: "form", "aria-labelledby": "add-voice", onsubmit: (e) => {
    e.preventDefault(); check(); } },
  el("h2", { id: "add-voice" }, "Add a voice"),
  field("Reference audio (wav, flac, ogg, mp3, m4a; 3-30 s of one speaker)", file),
  el("div", { class: "row" }, record, recordNote),
  field("Voice ID (optional)", id, "Letters, digits, dot, dash, underscore; made up when empty."),
  field("Transcript of the reference", transcript),
  field("Language (optional)", language, "A BCP-47 tag such as en, zh or yue."),
  field("Consent recording (the same speaker saying the consent statement)", consent,
    "Needed to register: \"I, <name>, agree that recordings of my voice may be used to " +
    "create a synthetic version of my voice.\""),
  field("Speaker's name", speaker, "Who gave the consent; the voice ID when empty."),
  el("div", { class: "row" }, el("button", { type: "submit", id: "v-check" }, "Check reference"),
    register),
  verdict);
}

async function voicesPage() {
  const list = el("div", { id: "voice-list" }, el("p", {}, "Loading voices..."));
  const player = el("div", { id: "v-player" });

  async function refresh() {
    let voices;
    try { voices = (await apiJson("/v1/voices")).data; } catch (err) {
      list.replaceChildren(el("p", { class: "error" }, `Voices not loaded: ${err.message}`));
      return;
    }
    if (!voices.length) { list.replaceChildren(el("p", {}, "No voices registered yet.")); return; }
    list.replaceChildren(table(`${voices.length} voice(s)`, ["voice", "language", "transcript",
      "created", "actions"], voices.map((v) => [v.id, v.language || "", v.transcript || "",
      v.created_at, actions(v)])));
  }

  function actions(v) {
    const cell = el("div", { class: "row" });
    const play = el("button", { type: "button", class: "plain", "aria-label": `Play reference of ${v.id}`,
      onclick: async () => {
        try {
          const blob = await (await api(`/v1/voices/${encodeURIComponent(v.id)}/reference`)).blob();
          const audio = el("audio", { controls: true, src: URL.createObjectURL(blob),
            "aria-label": `${v.id}'s reference` });
          player.replaceChildren(el("p", {}, `Reference of ${v.id}:`), audio);
          audio.play().catch(() => {});
        } catch (err) { say(`Reference not played: ${err.message}`, true); }
      } }, "Play reference");
    const del = el("button", { type: "button", class: "plain", "aria-label": `Delete ${v.id}`,
      onclick: () => confirmDelete(v.id, cell) }, "Delete");
    cell.append(play, del);
    return cell;
  }

  function confirmDelete(voiceId, cell) {
    const keep = cell.cloneNode(false);
    const question = el("div", { class: "row", role: "group", "aria-label": "Confirm deletion" },
      el("span", {}, `Delete ${voiceId} and its stored objects?`),
      el("button", { type: "button", class: "danger", id: "v-confirm", onclick: async () => {
        try {
          await api(`/v1/voices/${encodeURIComponent(voiceId)}`, { method: "DELETE" });
          say(`Voice ${voiceId} deleted.`);
          refresh();
        } catch (err) { say(`Not deleted: ${err.message}`, true); }
      } }, "Yes, delete"),
      el("button", { type: "button", class: "plain", onclick: () => refresh() }, "Cancel"));
    keep.append(question);
    cell.replaceWith(keep);
    keep.querySelector("button.danger").focus();
  }

  main.replaceChildren(el("h1", {}, "Voices"),
    el("p", {}, "The voices registered on this gateway's store. Voices are not yet per tenant: every key sees and can delete all of them."), list, player,
    voiceForm(refresh));
  await refresh();
}

// -- Speak ---------------------------------------------------------------------------------

const takes = []; // this session's takes: {text, voice, format, url, name, firstMs, seconds}
// What Web Audio was given and played, for tests and the curious (no key or text in it).
window.vfAudio = { samples: 0, played: 0, chunks: 0, firstAudioMs: null, lastAudioMs: null };

function wavFile(pcm, rate = RATE) { // s16le mono -> a WAV file
  const header = new DataView(new ArrayBuffer(44));
  const put = (at, text) => [...text].forEach((c, i) => header.setUint8(at + i, c.charCodeAt(0)));
  put(0, "RIFF"); header.setUint32(4, 36 + pcm.byteLength, true); put(8, "WAVE");
  put(12, "fmt "); header.setUint32(16, 16, true); header.setUint16(20, 1, true);
  header.setUint16(22, 1, true); header.setUint32(24, rate, true);
  header.setUint32(28, rate * 2, true); header.setUint16(32, 2, true);
  header.setUint16(34, 16, true); put(36, "data"); header.setUint32(40, pcm.byteLength, true);
  return new Blob([header, pcm], { type: "audio/wav" });
}

async function streamPcm(response, started, onFirst) {
  const ctx = new AudioContext({ sampleRate: RATE });
  await ctx.resume();
  const reader = response.body.getReader();
  const parts = [];
  let carry = null; // an odd byte left from the previous piece
  let next = 0;
  let first = true;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    let bytes = value;
    if (carry !== null) { bytes = new Uint8Array(value.length + 1); bytes[0] = carry; bytes.set(value, 1); }
    const even = bytes.length - (bytes.length % 2);
    carry = even < bytes.length ? bytes[even] : null;
    if (!even) continue;
    const piece = bytes.slice(0, even);
    parts.push(piece);
    const ints = new Int16Array(piece.buffer);
    const buffer = ctx.createBuffer(1, ints.length, RATE);
    const floats = buffer.getChannelData(0);
    for (let i = 0; i < ints.length; i++) floats[i] = ints[i] / 32768;
    const node = ctx.createBufferSource();
    node.buffer = buffer;
    node.connect(ctx.destination);
    next = Math.max(next, ctx.currentTime + 0.03);
    node.start(next);
    next += buffer.duration;
    node.addEventListener("ended", () => { window.vfAudio.played += ints.length; });
    window.vfAudio.samples += ints.length;
    window.vfAudio.chunks += 1;
    window.vfAudio.lastAudioMs = performance.now() - started;
    if (first) { first = false; onFirst(window.vfAudio.lastAudioMs); }
  }
  const pcm = new Blob(parts);
  return { blob: wavFile(await pcm.arrayBuffer()), seconds: pcm.size / 2 / RATE };
}

function annotations(text) { // "word = [markup]" per line -> {"word": "[markup]"}
  const out = {};
  for (const line of text.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0) out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return Object.keys(out).length ? out : null;
}

async function speakPage(live) {
  const text = el("textarea", { id: "s-text", rows: 4, required: true, maxlength: 4096 },
    "Hello from the voice factory. This line streams as it is made.");
  const voice = el("select", { id: "s-voice", required: true });
  const language = el("input", { id: "s-language", type: "text", placeholder: "en" });
  const instructions = el("textarea", { id: "s-instructions", rows: 2 });
  const format = el("select", { id: "s-format" },
    ["pcm", "wav", "mp3", "opus", "flac", "aac"].map((f) => el("option", { value: f }, f)));
  const speed = el("input", { id: "s-speed", type: "number", min: "0.5", max: "2", step: "0.1",
    value: "1" });
  const notes = el("textarea", { id: "s-annotations", rows: 2, placeholder: "read = [R][EH1][D]" });
  const first = el("output", { id: "s-first", class: "metric", for: "s-text" }, "-");
  const go = el("button", { type: "submit", id: "s-go" }, "Speak");
  const history = el("div", { id: "s-history" });

  try {
    const voices = (await apiJson("/v1/voices")).data;
    voice.replaceChildren(...voices.map((v) => el("option", { value: v.id }, v.id)));
    if (!voices.length) voice.append(el("option", { value: "" }, "no voices yet"));
  } catch (err) { say(`Voices not loaded: ${err.message}`, true); }
  if (!live()) return;

  function showHistory() {
    history.replaceChildren(el("h2", { id: "takes" }, "This session's takes"),
      takes.length ? el("ol", { "aria-labelledby": "takes" }, takes.map((t) => el("li", {},
        el("p", {}, `${t.voice}, ${t.format}, ${t.seconds.toFixed(2)} s, first audio after `
          + `${Math.round(t.firstMs)} ms: "${t.text.slice(0, 80)}"`),
        el("div", { class: "row" }, el("audio", { controls: true, src: t.url,
          "aria-label": `Take ${t.name}` }),
        el("a", { href: t.url, download: t.name }, `Download ${t.name}`)))))
        : el("p", {}, "None yet."));
  }

  async function speak(event) {
    event.preventDefault();
    go.disabled = true;
    first.textContent = "waiting...";
    const fmt = format.value;
    const streaming = fmt === "pcm" || fmt === "wav";
    const body = { model: "tts-1", input: text.value, voice: voice.value,
      response_format: streaming ? "pcm" : fmt, speed: Number(speed.value) };
    if (streaming) body.stream_format = "audio";
    if (language.value.trim()) body.language = language.value.trim();
    if (instructions.value.trim()) body.instructions = instructions.value.trim();
    const marks = annotations(notes.value);
    if (marks) body.annotations = marks;
    const started = performance.now();
    try {
      const response = await api("/v1/audio/speech", { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      let take;
      let firstMs = null;
      const shown = (ms) => { firstMs = ms; window.vfAudio.firstAudioMs = ms;
        first.textContent = `${Math.round(ms)} ms`; };
      if (streaming) {
        take = await streamPcm(response, started, shown);
      } else {
        const blob = await response.blob();
        shown(performance.now() - started);
        const audio = new Audio(URL.createObjectURL(blob));
        await new Promise((resolve) => { // its length for the history, if the browser says
          audio.addEventListener("loadedmetadata", resolve, { once: true });
          audio.addEventListener("error", resolve, { once: true });
          setTimeout(resolve, 3000);
        });
        take = { blob, seconds: audio.duration };
        audio.play().catch(() => {});
      }
      const ext = fmt === "pcm" ? "wav" : (fmt === "opus" ? "ogg" : fmt);
      takes.unshift({ text: text.value, voice: voice.value, format: fmt, firstMs,
        url: URL.createObjectURL(take.blob), name: `take-${takes.length + 1}.${ext}`,
        seconds: Number.isFinite(take.seconds) ? take.seconds : 0 });
      say(`Spoken: first audio after ${Math.round(firstMs)} ms.`);
      showHistory();
    } catch (err) {
      first.textContent = "-";
      say(`Not spoken: ${err.message}`, true);
    } finally { go.disabled = false; }
  }

  main.replaceChildren(el("h1", {}, "Speak"),
    el("form", { class: "form", onsubmit: speak },
      field("Text", text, "Up to 4,096 characters; longer inputs are split at sentence ends."),
      field("Voice", voice),
      field("Language (optional)", language, "A BCP-47 tag or a name; the voice's own when empty."),
      field("Instructions (optional)", instructions, "How to say it, e.g. \"calm, slow\"."),
      field("Format", format, "pcm and wav play while they are made (Web Audio); the others "
        + "play once the whole file came."),
      field("Speed", speed, "0.5 to 2.0."),
      field("Pronunciation hints (optional)", notes, "One per line: word = markup."),
      el("details", {}, el("summary", {}, "How pronunciation hints work"),
        el("p", {}, "A hint is written after each whole-word occurrence of the word in the text. "
          + "Chinese takes pinyin, one bracket per initial and final with the tone: ",
        el("code", {}, "好 = [h][ǎo]"), " (or the tone number, ", el("code", {}, "[h][ao3]"),
        "). English takes ARPAbet phonemes with stress digits: ",
        el("code", {}, "read = [R][EH1][D]"), ". A hint the engine cannot parse is refused "
          + "with the word named, before anything is synthesized.")),
      el("div", { class: "row" }, go, el("span", {}, "First audio: "), first)),
    history);
  showHistory();
}

// -- Jobs ----------------------------------------------------------------------------------

function scriptFrom(text, jobId) { // JSON (what `job run` reads) or JSONL (one line each)
  const trimmed = text.trim();
  try {
    const doc = JSON.parse(trimmed);
    if (Array.isArray(doc)) return { job_id: jobId, lines: doc };
    if (doc && !doc.job_id && jobId) doc.job_id = jobId;
    if (doc && doc.lines) return doc;
    return { job_id: jobId, lines: [doc] };
  } catch {
    const lines = trimmed.split("\n").filter((l) => l.trim()).map((l, i) => {
      try { return JSON.parse(l); } catch (err) { throw new Error(`line ${i + 1}: ${err.message}`); }
    });
    return { job_id: jobId, lines };
  }
}

async function jobsPage(live) {
  const script = el("textarea", { id: "j-script", rows: 8, spellcheck: "false" });
  const file = el("input", { id: "j-file", type: "file", accept: ".json,.jsonl,application/json" });
  const jobId = el("input", { id: "j-id", type: "text",
    value: `job-${Date.now().toString(36)}` });
  const view = el("section", { id: "j-view", "aria-live": "polite", "aria-label": "Job status" });
  file.addEventListener("change", async () => {
    if (file.files[0]) script.value = await file.files[0].text();
  });

  async function submit(event) {
    event.preventDefault();
    let doc;
    try { doc = scriptFrom(script.value, jobId.value.trim()); } catch (err) {
      say(`The script is not JSON or JSONL: ${err.message}`, true); return;
    }
    try {
      const job = await apiJson("/v1/jobs", { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(doc) });
      say(`Job ${job.id} queued: ${job.total} line(s).`);
      if (live()) watch(job.id, doc.lines);
    } catch (err) {
      const missing = err.body && err.body.voices;
      say(`Job refused: ${err.message}${missing ? ` (${JSON.stringify(missing)})` : ""}`, true);
    }
  }

  function watch(id, lines) {
    clearInterval(timer);
    const poll = async () => {
      let job;
      try { job = await apiJson(`/v1/jobs/${encodeURIComponent(id)}`); } catch (err) {
        view.replaceChildren(el("p", { class: "error" }, `Job ${id}: ${err.message}`)); return;
      }
      if (job.status === "running") { showRunning(job, lines); return; }
      clearInterval(timer);
      showClosed(job, lines);
    };
    poll();
    timer = setInterval(poll, 1000);
  }

  const named = (job) => (job.version > 1 ? `${job.id} v${job.version}` : job.id);

  function showRunning(job, lines) {
    const byIndex = new Map((job.lines || []).map((a) => [a.index, a]));
    view.replaceChildren(el("h2", {}, `Job ${named(job)}: running`),
      el("p", { id: "j-state" }, `${job.done} of ${job.total} line(s) answered `
        + `(${job.succeeded} succeeded, ${job.failed} failed).`),
      el("progress", { max: job.total, value: job.done, "aria-label": "Lines answered" }),
      table("Each line's status so far (clips come when the job closes)",
        ["line", "voice", "text", "status"], lines.map((l, i) => {
          const answer = byIndex.get(i);
          const status = !answer ? el("span", {}, "waiting")
            : el("span", { class: answer.status === "succeeded" ? "ok" : "bad" },
              answer.code ? `${answer.status} (${answer.code})` : answer.status);
          return [String(i + 1), l.voice || "", l.text || "", status];
        })));
  }

  function fileButton(job, what, label, name, disabled = false) {
    return el("button", { type: "button", class: "plain", disabled, onclick: async () => {
      try {
        const blob = await (await api(`/v1/jobs/${encodeURIComponent(job.id)}/${what}`)).blob();
        download(blob, name);
        say(`${name} downloaded.`);
      } catch (err) { say(`${name} not downloaded: ${err.message}`, true); }
    } }, label);
  }

  // The job's next version (POST /v1/jobs/{id}/rerun, what `job rerun --failed` does): the
  // lines without audio again, the others carried; the page follows that version.
  async function rerun(job, lines) {
    try {
      const queued = await apiJson(`/v1/jobs/${encodeURIComponent(job.id)}/rerun`, {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ failed: true }) });
      say(`Job ${queued.id} version ${queued.version} queued: line(s) `
        + `${queued.lines.map((i) => i + 1).join(", ")} again.`);
      watch(queued.id, lines);
    } catch (err) { say(`Re-run refused: ${err.message}`, true); }
  }

  function showClosed(job, lines) {
    const player = el("div", { id: "j-player" });
    const again = [...job.clips.filter((c) => c.status !== "succeeded").map((c) => c.index),
      ...job.missing].filter((i) => lines[i]).sort((a, b) => a - b);
    const srt = fileButton(job, "subtitles", "Download subtitles (SRT)", `${job.id}.srt`,
      !job.subtitles);
    srt.className = "";
    const redo = el("button", { type: "button", class: "plain", disabled: !again.length,
      onclick: () => rerun(job, lines) },
    again.length ? `Re-run ${again.length} failed line(s)` : "Re-run failed lines");
    view.replaceChildren(el("h2", {}, `Job ${named(job)}: ${job.status}`),
      el("p", { id: "j-state" }, `${job.done} of ${job.total} line(s) done, `
        + `${job.duration_s.toFixed(1)} s of audio${job.missing.length
          ? `; missing lines: ${job.missing.map((i) => i + 1).join(", ")}` : ""}.`),
      el("div", { class: "row" }, srt,
        fileButton(job, "timeline", "Download timeline (JSON)", `${job.id}-timeline.json`),
        fileButton(job, "clips.zip", "Download clips (zip)", `${job.id}-clips.zip`), redo),
      table("Each line's result", ["line", "voice", "text", "status", "seconds", "clip"],
        job.clips.map((c) => [String(c.index + 1), c.voice_id, c.text,
          el("span", { class: c.status === "succeeded" ? "ok" : "bad" }, c.status),
          c.duration_s.toFixed(2),
          c.audio ? el("button", { type: "button", class: "plain",
            "aria-label": `Play line ${c.index + 1}`, onclick: async () => {
              try {
                const blob = await (await api(`/v1/jobs/${encodeURIComponent(job.id)}/clips/${c.index}`)).blob();
                const audio = el("audio", { controls: true, src: URL.createObjectURL(blob),
                  "aria-label": `Line ${c.index + 1}` });
                player.replaceChildren(el("p", {}, `Line ${c.index + 1}:`), audio);
                audio.play().catch(() => {});
              } catch (err) { say(`Clip not played: ${err.message}`, true); }
            } }, "Play") : (c.error ? c.error.code : "")])),
      player);
  }

  main.replaceChildren(el("h1", {}, "Jobs"),
    el("form", { class: "form", onsubmit: submit },
      el("p", {}, "A script as ", el("code", {}, "voicefactory job run"), " reads it: JSON with ",
        el("code", {}, "lines"),
        " (each a voice and a text), or JSONL with one line object per row."),
      field("Job ID", jobId, "Used when the script names none."),
      field("Script file", file),
      field("Script", script, 'e.g. {"voice": "narrator-1", "text": "Line one."} per row'),
      el("div", { class: "row" }, el("button", { type: "submit", id: "j-submit" }, "Submit job"))),
    view);
}

// -- Fleet ---------------------------------------------------------------------------------

async function fleetPage(live) {
  const body = el("div", { id: "f-body" }, el("p", {}, "Loading..."));
  main.replaceChildren(el("h1", {}, "Fleet"),
    el("p", {}, "What this gateway replica reads: the workers' statuses on tts.fleet (with "
      + "their profile cache and error counts), where it routed requests and why, the "
      + "interactive lane's lag, and its own error answers. Refreshed every 2 s."), body);

  async function refresh() {
    let f;
    try { f = await apiJson("/v1/fleet"); } catch (err) {
      body.replaceChildren(el("p", { class: "error" }, `Fleet not loaded: ${err.message}`)); return;
    }
    const lag = f.interactive_lag;
    const lane = (w, name) => {
      const l = w.lanes[name];
      return `${l.load} waiting or running, ${l.slots} slot(s); partitions ${l.partitions.join(", ") || "none"}`
        + `; shard partitions ${l.shards.join(", ") || "none"}`;
    };
    const ratio = (c) => (!c || c.hit_ratio === null ? "no lookups yet"
      : `${(c.hit_ratio * 100).toFixed(1)}% of ${c.hit + c.store + c.miss}`);
    body.replaceChildren(
      el("p", {}, `Routing: ${f.routing}. This replica (${f.gateway.instance}): `
        + `${f.gateway.open_streams} open stream(s), reply partitions `
        + `${f.gateway.reply_partitions.join(", ") || "none"}.`),
      el("h2", {}, "Workers"),
      f.workers.length ? table(`${f.workers.length} worker(s)`, ["worker", "state", "interactive",
        "batch", "hot voices", "profile cache hits", "status age"], f.workers.map((w) => [w.id,
        el("span", { class: w.alive ? "ok" : "bad" }, w.draining ? "draining" : (w.alive ? "live" : "stale")),
        lane(w, "interactive"), lane(w, "batch"), String(w.hot_voices),
        w.cache ? ratio(w.cache) : "not reported", `${w.age_s} s`]))
        : el("p", {}, f.view.available ? "No worker status on tts.fleet." : "No fleet view (routing by voice ID)."),
      el("h2", {}, "Routes"),
      f.routes.length ? table("Requests this replica produced, by lane and why the fleet "
        + "router chose their worker (moved: a worker without the voice's profile)",
      ["lane", "reason", "requests"], f.routes.map((r) => [r.lane, r.reason, String(r.count)]))
        : el("p", { id: "f-routes" }, "None produced yet."),
      el("h2", {}, "Profile cache"),
      el("p", { id: "f-cache" }, `Fleet-wide hit ratio: ${ratio(f.cache)}`
        + (f.cache.hit_ratio === null ? "." : ` lookup(s) (${f.cache.store} loaded from the `
          + `store, ${f.cache.miss} computed), since each worker started.`)),
      el("h2", {}, "Worker errors by code"),
      f.recent_errors_by_code.length ? table(`In the last ${f.recent_window_s / 60} min (as `
        + "this page has seen them)", ["code", "results"],
      f.recent_errors_by_code.map((e) => [e.code, String(e.count)]))
        : el("p", { id: "f-recent-codes" }, `None in the last ${f.recent_window_s / 60} min `
          + "(counted from when this page first looked)."),
      f.errors_by_code.length ? table("Results other than succeeded, by error code, since "
        + "each worker started", ["code", "results"],
      f.errors_by_code.map((e) => [e.code, String(e.count)]))
        : el("p", { id: "f-codes" }, "None reported."),
      el("h2", {}, "Interactive lane lag"),
      el("p", { id: "f-lag" }, lag.total === null ? "Not sampled yet."
        : `${lag.total} request(s) behind (503 above ${lag.threshold}).`),
      Object.keys(lag.partitions).length ? table("Lag per partition",
        ["partition", ...Object.keys(lag.partitions)],
        [["lag", ...Object.values(lag.partitions).map(String)]]) : "",
      el("h2", {}, "Errors answered"),
      f.errors.length ? table("4xx and 5xx answers by route", ["route", "status", "count"],
        f.errors.map((e) => [e.route, String(e.status), String(e.count)])) : el("p", {}, "None."));
  }
  await refresh();
  if (live()) timer = setInterval(refresh, 2000);
}

// -- routing -------------------------------------------------------------------------------

const PAGES = { voices: voicesPage, speak: speakPage, jobs: jobsPage, fleet: fleetPage };

async function route() {
  clearInterval(timer);
  const mine = ++shown;
  const live = () => mine === shown;
  const name = (location.hash.match(/^#\/(\w+)/) || [])[1];
  const page = PAGES[name] ? name : "voices";
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === `#/${page}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${page[0].toUpperCase()}${page.slice(1)} - VoiceFactory console`;
  if (!key()) {
    main.replaceChildren(el("h1", {}, "VoiceFactory console"),
      el("p", {}, "Enter an API key above (", el("code", {}, "voicefactory gateway keys add TENANT"),
        " prints one) to open the voices, speech, jobs and fleet pages."));
    document.getElementById("api-key").focus();
    return;
  }
  await PAGES[page](live);
  if (!live()) return;
  main.dataset.page = page;
  main.focus();
}

window.addEventListener("hashchange", route);
route();
