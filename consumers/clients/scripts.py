"""`voicefactory job run SCRIPT`'s file: YAML or JSON -> `pipeline.jobscript.parse_script`.

    SCRIPT file --load_script--> document --parse_script (pipeline/jobscript.py)--> Script

The parsing itself (lines, requests, manifest) lives in pipeline/jobscript.py, which the
gateway's POST /v1/jobs, this CLI and the aggregator all import; this module only reads the
file. A bad line fails with the file, line and rule in the message, before anything is
produced (`voicefactory job run` exits 2).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from pipeline.jobscript import (
    FORMATS,
    Script,
    ScriptError,
    line_options,
    parse_script,
    request_id_for,
)

__all__ = ["FORMATS", "Script", "ScriptError", "line_options", "load_script", "parse_script",
           "request_id_for"]


def load_script(path: Path, *, concat: bool | None = None) -> Script:
    """Read and check a script; `concat` (the --concat flag) overrides the script's own."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: {exc.strerror or exc}") from None
    try:
        doc = orjson.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                          f"{exc}") from None
    return parse_script(doc, source=str(path), concat=concat)
