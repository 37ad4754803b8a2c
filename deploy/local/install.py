"""First-time installs for the local stack, cached per version in the user cache dir.

Kafka: `mvn dependency:copy-dependencies` on `kafka-pom.xml` copies the broker's jars from
Maven Central. S3 server: `go install` builds Versity S3 Gateway through the Go module proxy.
Each install writes a `.complete` marker last, so an interrupted install is redone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

KAFKA_VERSION = "4.1.1"
VERSITYGW_VERSION = "v1.8.0"
VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"
_HERE = Path(__file__).resolve().parent


class InstallError(RuntimeError):
    pass


def cache_root() -> Path:
    base = os.environ.get("VF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "voicefactory"
    )
    return Path(base)


def kafka_libs() -> Path:
    return cache_root() / f"kafka-{KAFKA_VERSION}" / "libs"


def versitygw_binary() -> Path:
    return cache_root() / f"versitygw-{VERSITYGW_VERSION}" / "versitygw"


def ensure_kafka(out: object = sys.stdout) -> Path:
    libs = kafka_libs()
    if (libs.parent / ".complete").exists():
        return libs
    _require("mvn", "apt-get install maven")
    _require("java", "apt-get install openjdk-17-jre-headless")
    if libs.exists():
        shutil.rmtree(libs)
    _say(out, f"installing Apache Kafka {KAFKA_VERSION} jars from Maven Central into {libs} ...")
    cmd = [
        "mvn", "-B", "-f", str(_HERE / "kafka-pom.xml"), "dependency:copy-dependencies",
        f"-Dkafka.version={KAFKA_VERSION}", f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
    ]
    _run_with_progress(cmd, out, "Downloaded from", "jars/poms fetched")
    if not any(libs.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
        raise InstallError(f"maven finished but {libs} has no kafka_2.13-{KAFKA_VERSION}.jar")
    (libs.parent / ".complete").write_text(KAFKA_VERSION + "\n")
    return libs


def ensure_versitygw(out: object = sys.stdout) -> Path:
    binary = versitygw_binary()
    if (binary.parent / ".complete").exists() and binary.exists():
        return binary
    _require("go", "install Go 1.24 or newer")
    binary.parent.mkdir(parents=True, exist_ok=True)
    _say(out, f"building Versity S3 Gateway {VERSITYGW_VERSION} with Go (first time, ~1-3 min) ...")
    env = dict(os.environ, GOBIN=str(binary.parent), CGO_ENABLED="0")
    _run_with_progress(["go", "install", f"{VERSITYGW_MODULE}@{VERSITYGW_VERSION}"], out,
                       "go: downloading", "modules downloaded", env=env)
    if not binary.exists():
        raise InstallError(f"go install finished but {binary} is missing")
    (binary.parent / ".complete").write_text(VERSITYGW_VERSION + "\n")
    return binary


def _require(tool: str, hint: str) -> None:
    if shutil.which(tool) is None:
        raise InstallError(f"{tool!r} is not on PATH ({hint}); `make setup` installs it")


def _say(out: object, line: str) -> None:
    print(line, file=out, flush=True)  # type: ignore[call-overload]


def _run_with_progress(cmd: list[str], out: object, marker: str, unit: str,
                       env: dict[str, str] | None = None) -> None:
    """Run a long install, printing a progress line every 20 fetched items; keep the log."""
    started = time.monotonic()
    lines: list[str] = []
    count = 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                count += 1
                if count % 20 == 0:
                    _say(out, f"  ... {count} {unit}, {time.monotonic() - started:.0f} s")
        rc = proc.wait()
    if rc != 0:
        tail = "".join(lines[-30:])
        raise InstallError(f"{' '.join(cmd[:2])} failed with exit code {rc}:\n{tail}")
    _say(out, f"  done in {time.monotonic() - started:.0f} s")
