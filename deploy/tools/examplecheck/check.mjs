// Validates every event example in the docs against the published JSON Schemas with ajv,
// the validator a Node.js consumer would use (draft 2020-12 via `ajv/dist/2020`, strict mode,
// formats from ajv-formats), so the docs are held to the schemas by something other than the
// Python code that generates them.
//
// Data flow:
//
//   topics/schemas/*.json --Ajv2020 (strict, allErrors) + ajv-formats--> one validator each
//   README.md, docs/**/*.md --fenced blocks, with the HTML comment just above each-->
//       ```json block          the whole body is one example; its "schema" names its schema
//       any other block        JSON objects inside it (a kcat line, a Java string) that carry
//                              "schema": "tts.….v1", or every object when the block is marked
//   docs/**/*.yaml (AsyncAPI) --components/channels messages--> examples[].payload (and
//                              examples[].headers) against the message's payload (headers)
//   -> one line per problem (file:line, heading, schema, ajv's error); exit 1 if any
//
// Markers, an HTML comment on the line(s) just above a fence:
//   <!-- example: tts.job.v1 -->          the block's objects are this event (the default for
//                                         an object with "schema"; needed for one without)
//   <!-- invalid-example: tts.request.v1 --> the block must FAIL this schema (a doc showing a
//                                         bad event); it is an error if it validates
//   <!-- not-an-event -->                 the block holds no event (a ```json block must be an
//                                         event or carry this)
// An object in a non-JSON block that has every required field of some schema but no marker
// and no "schema" is an error too, so an example cannot slip past unchecked.
//
// Usage: node check.mjs [--root DIR] [--modules DIR] [FILE ...]
//   --root     the checkout (default: the current directory): schemas from topics/schemas/,
//              and without FILEs every README.md and docs/ file, plus a check that every
//              schema has at least one example
//   --modules  the node_modules folder with ajv, ajv-formats and yaml (default: the one next
//              to this file); `python -m deploy.tools.install` installs it into the user cache
// Exit 0 when every example validates, 1 when one does not, 2 on a usage error.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MARKER = /^<!--\s*(example|invalid-example):\s*([\w.]+)\s*-->$|^<!--\s*(not-an-event)\s*-->$/;
const EVENT_NAME = /^tts\.[a-z]+\.v[0-9]+$/;
const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+-]*)/;

function usage(message) {
  process.stderr.write(`check.mjs: ${message}\n` +
    "usage: node check.mjs [--root DIR] [--modules DIR] [FILE ...]\n");
  process.exit(2);
}

function parseArgs(argv) {
  const args = { root: process.cwd(), modules: path.join(HERE, "node_modules"), files: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--root" || arg === "--modules") {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      args[arg.slice(2)] = path.resolve(argv[++i]);
    } else if (arg.startsWith("-")) {
      usage(`unknown option ${arg}`);
    } else {
      args.files.push(path.resolve(arg));
    }
  }
  return args;
}

// -- schemas -------------------------------------------------------------------------------

function loadValidators(modules, schemaDir, problems) {
  const require = createRequire(path.join(modules, "noop.js"));
  const Ajv2020 = require("ajv/dist/2020").default;
  const addFormats = require("ajv-formats").default;
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  addFormats(ajv);
  const validators = new Map();
  const files = fs.existsSync(schemaDir) ?
    fs.readdirSync(schemaDir).filter((f) => f.endsWith(".json")).sort() : [];
  if (files.length === 0) problems.push(`${schemaDir}: no JSON Schemas`);
  for (const file of files) {
    const name = file.slice(0, -".json".length);
    const full = path.join(schemaDir, file);
    try {
      const schema = JSON.parse(fs.readFileSync(full, "utf8"));
      validators.set(name, { validate: ajv.compile(schema), file: fs.realpathSync(full) });
    } catch (err) {
      problems.push(`${full}: does not compile with ajv (strict): ${err.message}`);
    }
  }
  return { ajv, validators };
}

function ajvErrors(errors) {
  return errors.map((e) => {
    const where = e.instancePath || "/";
    const extra = e.keyword === "additionalProperties" ? ` (${e.params.additionalProperty})`
      : e.keyword === "enum" ? ` (${e.params.allowedValues.map((v) => JSON.stringify(v)).join(", ")})`
        : "";
    return `${where} ${e.message}${extra}`;
  }).join("; ");
}

// -- markdown ------------------------------------------------------------------------------

function* fencedBlocks(text) {
  // Yields {lang, body, line (1-based, of the opening fence), heading, marker}.
  const lines = text.split("\n");
  const headings = [];
  let fence = null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (fence) {
      const close = line.match(/^\s*(`{3,}|~{3,})\s*$/);
      if (close && close[1][0] === fence.mark[0] && close[1].length >= fence.mark.length) {
        yield { ...fence, body: lines.slice(fence.start, i).join("\n") };
        fence = null;
      }
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*?)\s*#*\s*$/);
    if (heading) {
      headings.length = heading[1].length - 1;
      headings[heading[1].length - 1] = heading[2];
      continue;
    }
    const open = line.match(FENCE);
    if (open) {
      let j = i - 1;
      while (j >= 0 && lines[j].trim() === "") j--;
      const marker = j >= 0 ? lines[j].trim().match(MARKER) : null;
      fence = {
        mark: open[1], lang: open[2].toLowerCase(), start: i + 1, line: i + 1,
        heading: headings.filter(Boolean).join(" > "),
        marker: marker ? { kind: marker[1] || marker[3], name: marker[2] || null } : null,
      };
    }
  }
  if (fence) yield { ...fence, body: lines.slice(fence.start).join("\n"), unclosed: true };
}

function embeddedObjects(body) {
  // JSON objects inside code: each `{` whose brace-balanced span parses as JSON, as written
  // or read as a string literal (`\"` and `\\` unescaped); line continuations (a backslash
  // at the end of a line, as in shell or a Java text block) are joined first.
  const text = body.replace(/\\\n[ \t]*/g, "");
  const found = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== "{") continue;
    let depth = 0;
    let end = -1;
    for (let j = i; j < text.length; j++) {
      if (text[j] === "{") depth++;
      else if (text[j] === "}" && --depth === 0) { end = j; break; }
    }
    if (end < 0) continue;
    const span = text.slice(i, end + 1);
    const value = parseObject(span) ?? parseObject(span.replace(/\\(["\\])/g, "$1"));
    if (value) {
      found.push({ value, line: text.slice(0, i).split("\n").length - 1 });
      i = end;
    }
  }
  return found;
}

function parseObject(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

function markdownExamples(file, text, validators, report) {
  for (const block of fencedBlocks(text)) {
    const kind = block.marker?.kind;
    const where = `${block.line}${block.heading ? ` (${block.heading})` : ""}`;
    if (kind === "not-an-event") continue;
    if (block.unclosed) {
      report.problem(file, where, "code fence is never closed");
      continue;
    }
    const marked = kind === "example" || kind === "invalid-example" ? block.marker.name : null;
    if (block.lang === "json") {
      const value = parseObject(block.body);
      if (!value) {
        report.problem(file, where, "```json block is not one JSON object: fix it, or mark it " +
          "<!-- not-an-event -->");
        continue;
      }
      const name = marked ?? value.schema;
      if (typeof name !== "string") {
        report.problem(file, where, "```json block has no \"schema\" field: name its schema " +
          "with <!-- example: NAME --> above it, or mark it <!-- not-an-event -->");
        continue;
      }
      report.example(file, where, name, value, kind === "invalid-example");
      continue;
    }
    const objects = embeddedObjects(block.body);
    if (marked && objects.length === 0) {
      report.problem(file, where, `marked as ${marked} but holds no JSON object`);
    }
    for (const { value, line } of objects) {
      const at = `${block.line + 1 + line}${block.heading ? ` (${block.heading})` : ""}`;
      if (marked) {
        report.example(file, at, marked, value, kind === "invalid-example");
      } else if (typeof value.schema === "string" && EVENT_NAME.test(value.schema)) {
        report.example(file, at, value.schema, value, false);
      } else {
        for (const [name, { validate }] of validators) {
          const required = validate.schema.required ?? [];
          if (required.length && required.every((k) => k in value)) {
            report.problem(file, at, `an object with every required field of ${name} but no ` +
              `"schema": mark the block <!-- example: ${name} --> or <!-- not-an-event -->`);
            break;
          }
        }
      }
    }
  }
}

// -- AsyncAPI ------------------------------------------------------------------------------

function asyncapiExamples(file, text, yaml, ajv, validators, report) {
  let doc;
  try {
    doc = yaml.parse(text);
  } catch (err) {
    report.problem(file, "1", `not YAML: ${err.message}`);
    return;
  }
  if (!doc || typeof doc !== "object" || !("asyncapi" in doc)) return;
  const messages = [];
  for (const [key, message] of Object.entries(doc.components?.messages ?? {})) {
    messages.push([`components.messages.${key}`, message]);
  }
  for (const [channel, body] of Object.entries(doc.channels ?? {})) {
    for (const [key, message] of Object.entries(body?.messages ?? {})) {
      if (message && !("$ref" in message)) messages.push([`channels.${channel}.messages.${key}`, message]);
    }
  }
  for (const [where, message] of messages) {
    const examples = message?.examples ?? [];
    if (examples.length === 0) continue;
    const payload = resolvePayload(file, doc, message.payload, validators);
    const headers = message.headers ? localRef(doc, message.headers) : null;
    examples.forEach((example, i) => {
      const at = `${where}.examples[${i}]${example.name ? ` (${example.name})` : ""}`;
      if (example.payload !== undefined) {
        if (!payload) {
          report.problem(file, at, "payload example, but the message's payload schema is " +
            "not one of topics/schemas/");
        } else {
          if (message.name && message.name !== payload) {
            report.problem(file, at, `message name ${message.name} but payload ${payload}`);
          }
          report.example(file, at, payload, example.payload, false);
        }
      }
      if (example.headers !== undefined) {
        if (!headers) {
          report.problem(file, at, "headers example, but the message declares no headers");
        } else {
          const validate = ajv.compile(headers);
          report.headers(file, at, validate(example.headers) ? null : ajvErrors(validate.errors));
        }
      }
    });
  }
}

function resolvePayload(file, doc, payload, validators) {
  // A multi-format schema ({schemaFormat, schema}) or a schema; its $ref names a file.
  const schema = payload && typeof payload === "object" && "schemaFormat" in payload ?
    payload.schema : payload;
  const ref = schema?.$ref;
  if (typeof ref !== "string" || ref.startsWith("#")) return null;
  const target = path.resolve(path.dirname(file), ref.split("#")[0]);
  const real = fs.existsSync(target) ? fs.realpathSync(target) : target;
  for (const [name, { file: schemaFile }] of validators) {
    if (schemaFile === real) return name;
  }
  return null;
}

function localRef(doc, value) {
  let node = value;
  const seen = new Set();
  while (node && typeof node === "object" && typeof node.$ref === "string" &&
         node.$ref.startsWith("#/") && !seen.has(node.$ref)) {
    seen.add(node.$ref);
    node = node.$ref.slice(2).split("/").reduce(
      (at, part) => at?.[part.replace(/~1/g, "/").replace(/~0/g, "~")], doc);
  }
  return node && typeof node === "object" ? node : null;
}

// -- files and the report ------------------------------------------------------------------

function docFiles(root) {
  const found = [];
  const readme = path.join(root, "README.md");
  if (fs.existsSync(readme)) found.push(readme);
  const walk = (dir) => {
    if (!fs.existsSync(dir)) return;
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort(
      (a, b) => a.name.localeCompare(b.name))) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (/\.(md|ya?ml)$/.test(entry.name)) found.push(full);
    }
  };
  walk(path.join(root, "docs"));
  return found;
}

class Report {
  constructor(root, validators) {
    this.root = root;
    this.validators = validators;
    this.problems = [];
    this.counts = new Map();   // file -> Map(name -> n)
  }

  rel(file) {
    const rel = path.relative(this.root, file);
    return rel.startsWith("..") ? file : rel;
  }

  problem(file, where, message) {
    this.problems.push(`${this.rel(file)}:${where}: ${message}`);
  }

  example(file, where, name, value, expectInvalid) {
    const entry = this.validators.get(name);
    if (!entry) {
      this.problem(file, where, `names schema ${name}, which topics/schemas/ does not have`);
      return;
    }
    if (value.schema !== undefined && value.schema !== name) {
      this.problem(file, where, `marked ${name} but its "schema" is ${JSON.stringify(value.schema)}`);
      return;
    }
    const ok = entry.validate(value);
    if (expectInvalid) {
      if (ok) this.problem(file, where, `marked invalid-example but validates against ${name}`);
    } else if (!ok) {
      this.problem(file, where, `${name}: ${ajvErrors(entry.validate.errors)}`);
    }
    const byName = this.counts.get(this.rel(file)) ?? new Map();
    byName.set(name, (byName.get(name) ?? 0) + 1);
    this.counts.set(this.rel(file), byName);
  }

  headers(file, where, error) {
    if (error) this.problem(file, where, `headers: ${error}`);
  }
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(path.join(args.modules, "ajv", "package.json"))) {
    process.stderr.write(`check.mjs: ${args.modules} has no ajv: run ` +
      "`python -m deploy.tools.install` (or `npm ci` next to this file)\n");
    process.exit(2);
  }
  const setup = [];
  const { ajv, validators } = loadValidators(
    args.modules, path.join(args.root, "topics", "schemas"), setup);
  const yaml = createRequire(path.join(args.modules, "noop.js"))("yaml");
  const report = new Report(args.root, validators);
  report.problems.push(...setup);
  const files = args.files.length ? args.files : docFiles(args.root);
  for (const file of files) {
    let text;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (err) {
      report.problem(file, "0", `cannot read: ${err.message}`);
      continue;
    }
    if (file.endsWith(".md")) markdownExamples(file, text, validators, report);
    else asyncapiExamples(file, text, yaml, ajv, validators, report);
  }
  if (!args.files.length) {
    const seen = new Set([...report.counts.values()].flatMap((m) => [...m.keys()]));
    for (const name of validators.keys()) {
      if (!seen.has(name)) report.problems.push(`docs: no example of ${name} anywhere`);
    }
  }
  let total = 0;
  for (const [file, byName] of report.counts) {
    const n = [...byName.values()].reduce((a, b) => a + b, 0);
    total += n;
    const names = [...byName].map(([name, k]) => `${name} x${k}`).join(", ");
    process.stdout.write(`${file}: ${n} example${n === 1 ? "" : "s"} (${names})\n`);
  }
  for (const problem of report.problems) process.stderr.write(`${problem}\n`);
  process.stdout.write(`${total} examples in ${report.counts.size} files checked against ` +
    `${validators.size} schemas with ajv (draft 2020-12, strict): ` +
    `${report.problems.length} problem${report.problems.length === 1 ? "" : "s"}\n`);
  process.exit(report.problems.length ? 1 : 0);
}

main();
