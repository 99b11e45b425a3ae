"""The archive of Spark's classes (launchers/session/class_archive.py): which options the next JVM gets, in each
state of the archive, and the build's own steps, with a stand-in ``java`` that keeps the real one's contract (it
writes the archive named by ``-XX:SharedArchiveFile`` from the list named by ``-XX:SharedClassListFile``, and
refuses a list whose last line is cut). The real dump and a real JVM mapping the archive: tests/ranks/."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_torchdist.launchers.session import class_archive

FAKE_JAVA = """#!/bin/sh
# a stand-in for `java -Xshare:dump`: the archive from the class list, or a failure as the real one fails
for a in "$@"; do
  case "$a" in
    -XX:SharedClassListFile=*) list="${a#*=}" ;;
    -XX:SharedArchiveFile=*) out="${a#*=}" ;;
  esac
done
[ -n "$SLEEP" ] && exec python3 -c "import time; time.sleep($SLEEP)" "$@"
[ -n "$FAIL" ] && { echo "Error: dump failed" ; exit 1; }
tail -c1 "$list" | od -c | grep -q '\\\\n' || { echo "Preload Warning: cut line"; exit 1; }
cp "$list" "$out"
"""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home, java = tmp_path / "spark", tmp_path / "jdk" / "bin" / "java"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_bytes(b"x" * 10)
    java.parent.mkdir(parents=True)
    java.write_text(FAKE_JAVA)
    java.chmod(0o755)
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(class_archive.ENV, raising=False)
    return tmp_path


def _archive() -> class_archive.Archive:
    archive = class_archive.current()
    assert archive is not None
    return archive


def test_a_first_jvm_records_its_classes_and_a_later_one_maps_the_archive(env: Path) -> None:
    archive = _archive()
    assert class_archive.java_options() == f"-XX:DumpLoadedClassList={archive.class_list(os.getpid())}"
    assert archive.where == env / "cache" / "jupyter-torchdist" / "jvm"
    assert oct(archive.where.stat().st_mode & 0o777) == "0o700"
    archive.path.write_bytes(b"archive")
    os.utime(archive.path, (1, 1))
    assert class_archive.java_options() == f"-XX:SharedArchiveFile={archive.path}"
    assert archive.path.stat().st_mtime > 1  # marked as used: the prune of unused archives leaves it


def test_while_another_process_builds_a_jvm_starts_as_without_one(env: Path) -> None:
    archive = _archive()
    archive.where.mkdir(parents=True)
    with open(archive.lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert class_archive.java_options() == ""
    assert class_archive.java_options().startswith("-XX:DumpLoadedClassList=")


@pytest.mark.parametrize("value", ["off", "0", "false", "OFF"])
def test_turned_off_nothing_is_recorded_or_used(env: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(class_archive.ENV, value)
    assert class_archive.java_options() == ""
    assert not (env / "cache").exists()
    assert class_archive.prepare(lambda: pytest.fail("nothing to rehearse"), out=open(os.devnull, "w")) == 1


def test_a_folder_named_for_everyone_holds_the_archive(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab = env / "lab-archive"
    monkeypatch.setenv(class_archive.ENV, str(lab))
    archive = _archive()
    assert archive.where == lab and class_archive.java_options().startswith(f"-XX:DumpLoadedClassList={lab}/")
    assert oct(lab.stat().st_mode & 0o777) == "0o755" and not (env / "cache").exists()
    archive.path.write_bytes(b"archive")
    assert class_archive.java_options() == f"-XX:SharedArchiveFile={archive.path}"


def test_the_key_follows_the_jars_and_the_java(env: Path) -> None:
    first = _archive().key
    (env / "spark" / "jars" / "spark-core.jar").write_bytes(b"y" * 11)
    second = _archive().key
    (env / "spark" / "jars" / "extra.jar").write_bytes(b"z")
    third = _archive().key
    assert len({first, second, third}) == 3


def test_no_java_or_a_cache_folder_spark_options_cannot_hold_means_no_archive(env: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(env / "my cache"))
    assert class_archive.current() is None and class_archive.java_options() == ""
    monkeypatch.setenv("XDG_CACHE_HOME", str(env / "cache"))
    monkeypatch.setenv("JAVA_HOME", str(env / "nowhere"))
    monkeypatch.setenv("PATH", str(env / "empty"))
    assert class_archive.current() is None


def _recorded(archive: class_archive.Archive, pid: int, lines: int, cut: bool = False) -> Path:
    archive.where.mkdir(parents=True, exist_ok=True)
    path = archive.class_list(pid)
    path.write_text("".join(f"java/lang/C{i} id: {i}\n" for i in range(lines)) + ("org/apache/spa" if cut else ""))
    archive.layout.write_text('{"java": "%s", "classpath": "/x.jar", "modules": []}'
                              % (Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_build_uses_the_longest_list_without_its_cut_last_line_and_tidies(env: Path) -> None:
    archive = _archive()
    gone = _dead_pid()
    _recorded(archive, gone, 3)
    _recorded(archive, os.getpid(), 5, cut=True)  # a JVM still writing: its last line is not whole yet
    built = class_archive.build(archive)
    assert built == archive.path and archive.path.read_text().count("\n") == 5
    assert not archive.class_list(gone).exists() and not archive.class_list(os.getpid()).exists()
    assert not archive.layout.exists()
    assert sorted(p.name for p in archive.where.iterdir()) == [archive.log.name, archive.path.name]


def test_a_failed_build_leaves_the_lists_for_the_next_and_no_half_archive(env: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive()
    _recorded(archive, _dead_pid(), 3)
    monkeypatch.setenv("FAIL", "1")
    assert class_archive.build(archive) is None
    assert not archive.ready() and "dump failed" in archive.log.read_text()
    assert not list(archive.where.glob("*.tmp")) and not list(archive.where.glob("*.complete"))
    assert len(archive.class_lists()) == 1 and archive.layout.exists()


def test_a_builder_whose_kernel_is_gone_stops_its_dump_and_leaves_no_files(env: Path) -> None:
    archive = _archive()
    _recorded(archive, _dead_pid(), 3)
    bogus_parent = _dead_pid()  # not the builder's parent: as if its kernel had died
    run = subprocess.run([sys.executable, "-m", class_archive.__name__, "build", str(bogus_parent)],
                         env={**os.environ, "SLEEP": "30"}, timeout=20)
    assert run.returncode == 1
    assert not archive.ready()
    assert not list(archive.where.glob("*.tmp")) and not list(archive.where.glob("*.complete"))
    ps = subprocess.run(["pgrep", "-f", f"SharedArchiveFile={archive.path}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", "the dump outlived its builder"
