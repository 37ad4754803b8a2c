"""deploy/tools/maven.py: a jar is used only when its sha256 is the pinned one, and a jar
without the member asked for says which. A stand-in `mvn` on PATH plays Maven Central."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from deploy.tools import maven


def _fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jar: bytes) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "served.jar").write_bytes(jar)
    script = bin_dir / "mvn"
    # copies the served jar to -DoutputDirectory, as dependency:copy does
    script.write_text("#!/bin/sh\nfor a in \"$@\"; do case $a in -DoutputDirectory=*) "
                      f"cp {tmp_path / 'served.jar'} \"${{a#-DoutputDirectory=}}/x.jar\";; "
                      "esac; done\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _jar(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


def test_the_pinned_jar_gives_its_members(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    jar = _jar({"crds/a.yaml": "kind: A\n"})
    _fake_mvn(tmp_path, monkeypatch, jar)
    pin = hashlib.sha256(jar).hexdigest()
    assert maven.read_members("g:a:1:jar:tests", pin, ("crds/a.yaml",)) == ["kind: A\n"]
    with pytest.raises(maven.MavenError, match=r"g:a:1:jar:tests has no crds/b\.yaml"):
        maven.read_members("g:a:1:jar:tests", pin, ("crds/b.yaml",))


def test_a_jar_that_is_not_the_pinned_one_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    jar = _jar({"crds/a.yaml": "kind: A\n"})
    _fake_mvn(tmp_path, monkeypatch, jar)
    with pytest.raises(maven.MavenError, match=f"has sha256 {hashlib.sha256(jar).hexdigest()}"
                                               ", pinned 0{64}"):
        maven.fetch("g:a:1", "0" * 64, tmp_path / "out")
