"""One artifact from Maven Central, by coordinates, held to a pinned sha256.

    fetch("io.strimzi:api:0.50.0:jar:tests", sha256, dest)
        -> mvn dependency:copy (the machine's own Maven and its settings) -> dest/FILE.jar
        -> sha256 checked against the pin -> the jar's path

Used by deploy/tools/install.py for artifacts that carry data, not code to run: Strimzi's
test jar is where its generated CRD YAML is published.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path


class MavenError(RuntimeError):
    pass


def fetch(coordinates: str, sha256: str, dest: Path) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("'mvn' is not on PATH (apt-get install maven; `make setup` does): "
                         f"it fetches {coordinates} from Maven Central")
    dest.mkdir(parents=True, exist_ok=True)
    # -B -q: batch mode, errors only; no project needed, transitive dependencies not fetched.
    proc = subprocess.run([mvn, "-B", "-q", "dependency:copy", f"-Dartifact={coordinates}",
                           f"-DoutputDirectory={dest}"],
                          capture_output=True, text=True, check=False, timeout=600)
    jars = sorted(dest.glob("*.jar"))
    if proc.returncode != 0 or len(jars) != 1:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise MavenError(f"mvn dependency:copy {coordinates} failed (exit {proc.returncode}, "
                         f"{len(jars)} jars):\n{tail}")
    digest = hashlib.sha256(jars[0].read_bytes()).hexdigest()
    if digest != sha256:
        raise MavenError(f"{coordinates} from Maven Central has sha256 {digest}, "
                         f"pinned {sha256}")
    return jars[0]


def read_members(coordinates: str, sha256: str, members: tuple[str, ...]) -> list[str]:
    """The text of these files inside the pinned jar (fetched to a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="vf-maven-") as tmp, \
            zipfile.ZipFile(fetch(coordinates, sha256, Path(tmp))) as zf:
        names = set(zf.namelist())
        missing = [m for m in members if m not in names]
        if missing:
            raise MavenError(f"{coordinates} has no {', '.join(missing)}")
        return [zf.read(m).decode("utf-8") for m in members]
