"""Class-data sharing for the embedded session's JVM: the classes Spark loads, parsed and verified once, mapped
from one archive file by every later JVM.

A Spark driver reads about 14,000 classes out of some 250 jars as it starts, and verifies each: most of the ten
seconds and twenty CPU-seconds a local session takes to come up, and of its first jobs. Java's class-data sharing
(CDS) maps them from an archive instead: the embedded session starts in about half the time and CPU
(``benchmarks/bench_class_archive.py``).

An archive belongs to one Java and one set of Spark jars: its name is a digest of both (``key``), and the JVM checks
again as it maps it (jars changed under it mean only that the JVM loads its classes as it would without one). Its
life, once per environment:

1. the first embedded session starts with ``-XX:DumpLoadedClassList``: its JVM lists the classes it loads, and the
   kernel notes the JVM's class path beside the list (``note_layout``);
2. once its warm-up is done, the kernel starts the builder (``build_in_background``): a process at the lowest
   priority that runs ``java -Xshare:dump`` on the list (about a minute of one core), puts the archive in place and
   ends; it ends with the kernel if the kernel goes first, leaving nothing (the next kernel builds it);
3. every later embedded session starts with ``-XX:SharedArchiveFile``.

``jupyter-torchdist prepare`` does all three at once and waits (for an image, or a lab's machines before class).
``JUPYTER_TORCHDIST_JVM_ARCHIVE=off`` turns it off; ``JUPYTER_TORCHDIST_JVM_ARCHIVE=/some/folder`` keeps the archives
there instead (a lab's server: built once by its administrator, used by every user, never written by a user who
cannot write there). Otherwise they live in ``~/.cache/jupyter-torchdist/jvm`` (about 170 MB each); one unused for
30 days is removed by the next build.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["ENV", "enabled", "folder", "Archive", "current", "java_options", "note_layout", "build_in_background",
           "build", "prepare"]

ENV: Final = "JUPYTER_TORCHDIST_JVM_ARCHIVE"
UNUSED_DAYS: Final = 30
_OFF = ("0", "off", "false", "no")
_builder: subprocess.Popen[bytes] | None = None


def enabled() -> bool:
    """Whether the embedded session uses (and builds) an archive: on unless ``JUPYTER_TORCHDIST_JVM_ARCHIVE=off``."""
    return os.environ.get(ENV, "").strip().lower() not in _OFF


def folder() -> Path:
    """Where the archives live: ``JUPYTER_TORCHDIST_JVM_ARCHIVE`` when it names a folder (a lab's one archive for
    every user, built there once by ``prepare``), else the user's cache."""
    named = os.environ.get(ENV, "").strip()
    if os.path.isabs(named):
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter-torchdist" / "jvm"


def _make(where: Path) -> None:
    """The user's own cache folder is theirs alone; a folder named for everyone is as its owner made it."""
    if not where.is_dir():
        where.mkdir(mode=0o700 if not os.path.isabs(os.environ.get(ENV, "").strip()) else 0o755, parents=True)


@dataclass(frozen=True)
class Archive:
    """The files of one (Java, Spark jars) pair's archive, by its key."""

    key: str
    where: Path

    @property
    def path(self) -> Path:
        return self.where / f"{self.key}.jsa"

    @property
    def layout(self) -> Path:
        """The recording JVM's java, class path and modules: what the dump must be given to match it."""
        return self.where / f"{self.key}.layout.json"

    @property
    def lock(self) -> Path:
        return self.where / f"{self.key}.lock"

    @property
    def log(self) -> Path:
        return self.where / f"{self.key}.build.log"

    def class_list(self, pid: int) -> Path:
        return self.where / f"{self.key}.{pid}.classlist"

    def class_lists(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.where.glob(f"{self.key}.*.classlist"):
            pid = path.name[len(self.key) + 1:-len(".classlist")]
            if pid.isdigit():
                found.append((int(pid), path))
        return found

    def ready(self) -> bool:
        return self.path.is_file()


def _java() -> str | None:
    """The java pyspark's launcher runs (``$JAVA_HOME/bin/java``, else the one on PATH), resolved."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.access(java, os.X_OK) else None


def _spark_home() -> Path | None:
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def current() -> Archive | None:
    """This environment's archive (ready or not), or None without Java or Spark's jars. A digest of the java
    binary and every jar's name, size and time: a few milliseconds."""
    java, home = _java(), _spark_home()
    if java is None or home is None or not (home / "jars").is_dir():
        return None
    digest = hashlib.sha256()
    for path in [Path(java), *sorted((home / "jars").glob("*.jar"))]:
        st = path.stat()
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    where = folder()
    if any(c in str(where) for c in " \t\"'\\"):
        return None  # Spark splits extraJavaOptions on spaces; such a cache folder gets no archive
    return Archive(digest.hexdigest()[:20], where)


def java_options() -> str:
    """What the next embedded JVM starts with: the archive when there is one; else, while nobody builds one, a list
    of the classes it loads (for the builder). Empty when turned off or impossible."""
    if not enabled():
        return ""
    archive = current()
    if archive is None:
        return ""
    if archive.ready():
        with contextlib.suppress(OSError):
            os.utime(archive.path)  # in use: the prune of unused archives leaves it
        return f"-XX:SharedArchiveFile={archive.path}"
    try:
        _make(archive.where)
    except OSError:
        return ""
    if not os.access(archive.where, os.W_OK) or _locked(archive):
        return ""  # being built right now: this JVM starts as without one
    return f"-XX:DumpLoadedClassList={archive.class_list(os.getpid())}"


def note_layout(session: Any) -> None:
    """Note the running JVM's java, class path and modules beside its class list (only while recording one)."""
    archive = current()
    if archive is None or not enabled() or archive.ready() or not archive.class_list(os.getpid()).exists():
        return
    try:
        jvm = session.sparkContext._jvm
        system = jvm.java.lang.System
        arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
        layout = {"java": os.path.join(str(system.getProperty("java.home")), "bin", "java"),
                  "classpath": str(system.getProperty("java.class.path")),
                  "modules": [str(a) for a in arguments if str(a).startswith("--add-modules")]}
        tmp = archive.layout.with_name(f"{archive.layout.name}.{os.getpid()}")
        tmp.write_text(json.dumps(layout))
        tmp.replace(archive.layout)
    except Exception:
        pass  # no archive this time; the session is what matters


def build_in_background() -> None:
    """After a warm-up that recorded a class list: start the builder, unless an archive is there or being built.
    The builder ends with this process (``_watch_parent``); it is stopped at exit too."""
    global _builder
    archive = current()
    if archive is None or not enabled() or not archive.class_list(os.getpid()).exists():
        return
    if archive.ready() or _locked(archive) or not archive.layout.exists() or _builder is not None:
        _forget_list(archive)
        return
    import atexit

    _builder = subprocess.Popen(  # our own module, in this interpreter
        [sys.executable, "-m", __name__, "build", str(os.getpid())], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    atexit.register(_stop_builder)


def _stop_builder() -> None:
    """At exit: the builder stops (its dump with it) and removes its files."""
    if _builder is not None and _builder.poll() is None:
        _builder.terminate()
        try:
            _builder.wait(5)
        except subprocess.TimeoutExpired:
            _builder.kill()
            _builder.wait()


def _forget_list(archive: Archive) -> None:
    with contextlib.suppress(OSError):
        archive.class_list(os.getpid()).unlink()


def _locked(archive: Archive) -> bool:
    try:
        with open(archive.lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return True  # cannot even take it: act as if someone builds
    return False


@contextlib.contextmanager
def _holding(archive: Archive, wait: bool) -> Iterator[bool]:
    """The build lock for ``archive``: yields whether it was taken (without ``wait``, not if another holds it)."""
    _make(archive.where)
    with open(archive.lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def build(archive: Archive, parent: int | None = None) -> Path | None:
    """Build ``archive`` from the longest class list recorded (the caller holds its lock); None when there is nothing
    to build from or the dump failed (its log says why). With ``parent``, give up as soon as that process is gone."""
    lists = sorted(archive.class_lists(), key=lambda found: found[1].stat().st_size, reverse=True)
    if not lists or not archive.layout.exists():
        return None
    layout = json.loads(archive.layout.read_text())
    classes = archive.where / f"{archive.key}.{os.getpid()}.complete"
    text = lists[0][1].read_bytes()
    classes.write_bytes(text[:text.rfind(b"\n") + 1])  # a JVM still running may be writing its last line
    tmp = archive.path.with_name(f"{archive.path.name}.{os.getpid()}.tmp")
    command = [layout["java"], "-Xshare:dump", f"-XX:SharedClassListFile={classes}", f"-XX:SharedArchiveFile={tmp}",
               "-cp", layout["classpath"], *layout["modules"]]
    try:
        with open(archive.log, "wb") as log:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=_lowest_priority_dying_with_us)
            ok = _wait(proc, parent) == 0 and tmp.exists()
        if ok:
            tmp.replace(archive.path)
            _tidy(archive)
        return archive.path if ok else None
    finally:
        for path in (classes, tmp):
            with contextlib.suppress(OSError):
                path.unlink()


def _wait(proc: subprocess.Popen[bytes], parent: int | None) -> int:
    """The dump's exit status; if ``parent`` goes first, the dump is killed (-9)."""
    while True:
        try:
            return proc.wait(1.0)
        except subprocess.TimeoutExpired:
            if parent is not None and os.getppid() != parent:
                proc.kill()
                proc.wait()
                return -signal.SIGKILL


def _lowest_priority_dying_with_us() -> None:
    from ...rank.forking import set_parent_death_signal

    os.nice(19)
    set_parent_death_signal()


def _tidy(archive: Archive) -> None:
    """After a build: class lists of processes gone, the layout, and archives unused for ``UNUSED_DAYS``."""
    for pid, path in archive.class_lists():
        if not _alive(pid) or pid in (os.getpid(), os.getppid()):
            with contextlib.suppress(OSError):
                path.unlink()
    with contextlib.suppress(OSError):
        archive.layout.unlink()
    old = time.time() - UNUSED_DAYS * 86400
    for path in archive.where.glob("*.jsa"):
        with contextlib.suppress(OSError):
            if path != archive.path and path.stat().st_mtime < old:
                path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare(rehearse: Callable[[], object], out: Any = sys.stdout) -> int:
    """``jupyter-torchdist prepare``: build this environment's archive now: ``rehearse`` starts an embedded session
    (which records its classes), runs what a notebook's first cells run and stops it; then the dump runs. Exit
    status 0 when the archive is there."""
    if not enabled():
        print(f"{ENV} is off: no archive is used or built.", file=out)
        return 1
    archive = current()
    if archive is None:
        print("No Java or no Spark jars were found: nothing to prepare (runs use local processes).", file=out)
        return 1
    if archive.ready():
        print(f"Ready: {archive.path} ({archive.path.stat().st_size >> 20} MB).", file=out)
        return 0
    began = time.monotonic()
    rehearse()
    with _holding(archive, wait=True):
        built = archive.path if archive.ready() else build(archive)
    if built is None:
        print(f"The archive could not be built; the dump's log: {archive.log}", file=out)
        return 1
    print(f"Built {built} ({built.stat().st_size >> 20} MB) in {time.monotonic() - began:.0f} s: embedded Spark "
          "sessions now start from it.", file=out)
    return 0


def _main(argv: list[str]) -> int:
    if argv[:1] == ["build"] and len(argv) == 2 and argv[1].isdigit():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # told to stop: its files go (build's finally)
        archive = current()
        if archive is None:
            return 1
        with _holding(archive, wait=False) as mine:
            if not mine or archive.ready():
                return 0
            return 0 if build(archive, parent=int(argv[1])) is not None else 1
    print(f"usage: python -m {__name__} build PARENT_PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
