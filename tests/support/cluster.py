"""A real Spark standalone cluster on loopback (a master and two 1-core workers), from the pip pyspark.

Its workers cannot see the notebooks' folder, as on a real cluster whose executors run on other machines: each worker
starts in a mount namespace of its own with an empty folder over ``Cluster.notebooks`` (where ``kernel_on`` starts its
kernels), so nothing beside a notebook reaches a rank unless the run sends it.

The ``cluster`` fixture (tests/conftest.py) starts it once per session and always stops it, with every process it
spawned (executor JVMs, their Python daemons and workers, rank processes) hunted down even when a test failed.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ROOT
from .procs import descendants_of, process_alive

__all__ = ["add_worker", "kernel_on", "Cluster", "session_conf", "spark_env", "start", "stop", "alive"]

START_TIMEOUT_S = 180.0


def _fast_jvm() -> str:
    """Short-lived test JVMs on 2 cores start about twice as fast without the optimising JIT and parallel GC, and
    about twice as fast again from the archive of Spark's classes (``.ci/run`` builds it first: ``jupyter-torchdist
    prepare``). A JVM whose class path differs from the archive's (a standalone worker's executors) loads its
    classes as without it."""
    from jupyter_torchdist.launchers.session.class_archive import current, enabled

    archive = current()
    shared = f" -XX:SharedArchiveFile={archive.path}" if archive is not None and archive.ready() and enabled() else ""
    return "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" + shared


FAST_JVM = _fast_jvm()


@dataclass
class Cluster:
    url: str
    workdir: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    started_in_s: float = 0.0

    @property
    def notebooks(self) -> Path:
        """Where the test notebooks' kernels run: hidden from the workers (an empty folder there)."""
        folder = self.workdir.parent / f"{self.workdir.name}-notebooks"
        folder.mkdir(exist_ok=True)
        return folder

    def logs(self, tail: int = 40) -> str:
        out = []
        for path in sorted(self.workdir.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def family(self) -> set[int]:
        """Every live process the cluster spawned (JVMs, executors, Python daemons, ranks)."""
        pids = {p.pid for p in self.procs if p.poll() is None}
        for p in list(pids):
            pids |= descendants_of(p)
        return pids


_RANK_ENV = frozenset({"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                       "LOCAL_RANK", "LOCAL_WORLD_SIZE"})


def spark_env(workdir: Path) -> dict[str, str]:
    import pyspark

    # A rank's own settings never come from the test process (a unit test may have set them there).
    env = {k: v for k, v in os.environ.items() if k not in _RANK_ENV}
    env.update(
        SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(workdir / "local"),
        PYSPARK_PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        # no REST server on the fixed port 6066, no web UIs: nothing that can clash with another cluster
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false -Dspark.ui.enabled=false",
        SPARK_WORKER_OPTS="-Dspark.ui.enabled=false",
        SPARK_DAEMON_JAVA_OPTS=FAST_JVM,
    )
    return env


def session_conf(url: str) -> dict[str, str]:
    """What a notebook needs to use this cluster (see the README's cluster section)."""
    return {
        "spark.master": url,
        "spark.app.name": "jupyter-torchdist-cluster-test",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executorEnv.PYTHONPATH": str(ROOT),
        "spark.pyspark.python": sys.executable,
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.driver.extraJavaOptions": FAST_JVM,
        "spark.executor.extraJavaOptions": FAST_JVM,
        "spark.python.daemon.module": "jupyter_torchdist._daemon",  # torch imported once per executor
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "ERROR",
    }


# Exec'd into spark-class with the parent-death signal set: even if pytest itself is killed, the JVMs go too.
_TRAMPOLINE = ("import os, sys; from jupyter_torchdist.rank.forking import set_parent_death_signal; "
               "set_parent_death_signal(); os.getppid() == int(sys.argv[1]) or sys.exit(1); "
               "os.execv(sys.argv[2], sys.argv[2:])")


def _start(cls: str, args: list[str], log: Path, env: dict[str, str], hide: Path | None = None) -> subprocess.Popen:
    """A Spark daemon; with ``hide``, in a mount namespace of its own where that folder is empty."""
    spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
    hidden = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"',
              str(hide)] if hide is not None else []
    with open(log, "wb") as out:
        return subprocess.Popen([*hidden, sys.executable, "-c", _TRAMPOLINE, str(os.getpid()), spark_class, cls, *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, deadline: float) -> re.Match[str]:
    """Poll a JVM's log for a line (test-side readiness check of an external process)."""
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        m = regex.search(log.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError(f"{log.name}: exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    raise TimeoutError(f"{log.name}: no {pattern!r} after {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}")


def stop(c: Cluster) -> list[int]:
    """SIGTERM the JVMs (a worker stops its executors), then SIGKILL whatever is left. Returns survivors."""
    family = c.family()
    for p in c.procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in c.procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    family |= c.family()
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for p in c.procs:
        p.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(family):
        time.sleep(0.1)
    return sorted(alive(family))


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if process_alive(pid)}


def fake_gpus(workdir: Path, env: dict[str, str], gpus: int) -> None:
    """Workers that declare ``gpus`` GPUs (a discovery script naming them): Spark schedules them like real
    ones, which is all a placement test needs (the ranks train on the CPU)."""
    script = workdir / "gpus.sh"
    addresses = ", ".join(f'"{i}"' for i in range(gpus))
    script.write_text(f'#!/bin/sh\necho \'{{"name": "gpu", "addresses": [{addresses}]}}\'\n')
    script.chmod(0o755)
    env["SPARK_WORKER_OPTS"] += (f" -Dspark.worker.resource.gpu.amount={gpus}"
                                 f" -Dspark.worker.resource.gpu.discoveryScript={script}")


def add_worker(c: Cluster, i: int, cores: int, env: dict[str, str] | None = None, wait: bool = True,
               memory: str = "1g") -> None:
    """Start worker ``i`` (and, with ``wait``, return once it has registered with the master)."""
    env = env or spark_env(c.workdir)
    (c.workdir / f"work-{i}").mkdir(exist_ok=True)
    proc = _start("org.apache.spark.deploy.worker.Worker",
                  ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", str(cores), "--memory", memory,
                   "--work-dir", str(c.workdir / f"work-{i}"), c.url], c.workdir / f"worker-{i}.log", env,
                  hide=c.notebooks)
    c.procs.append(proc)
    if wait:
        _wait_for(c.workdir / f"worker-{i}.log", r"Successfully registered with master", proc,
                  time.monotonic() + START_TIMEOUT_S)


def start(workdir: Path, workers: int = 2, cores: int = 1, gpus: int = 0, memory: str = "1g") -> Cluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each (a 512m executor per 1-core slot
    needs 512m of the worker's memory)."""
    t0 = time.monotonic()
    (workdir / "local").mkdir(exist_ok=True)
    env = spark_env(workdir)
    if gpus:
        fake_gpus(workdir, env, gpus)
    deadline = time.monotonic() + START_TIMEOUT_S
    c = Cluster(url="", workdir=workdir)
    try:
        master = _start("org.apache.spark.deploy.master.Master",
                        ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"], workdir / "master.log", env)
        c.procs.append(master)
        c.url = _wait_for(workdir / "master.log", r"Starting Spark master at (spark://\S+)", master, deadline)[1]
        for i in range(workers):
            add_worker(c, i, cores, env, wait=False, memory=memory)
        for i in range(workers):
            _wait_for(workdir / f"worker-{i}.log", r"Successfully registered with master", c.procs[i + 1], deadline)
    except BaseException:
        stop(c)
        raise
    c.started_in_s = time.monotonic() - t0
    return c



def kernel_on(c: Cluster, conf: dict[str, str] | None = None, name: str = "notebook",
              pyspark_python: bool = True, env: dict[str, str] | None = None) -> Any:
    """A real kernel (``support.kernel.Kernel``) whose notebook built a session on ``c`` (``session_conf`` and
    ``conf``), then loaded the extension; ``executors()`` in it counts the session's executors. Without
    ``pyspark_python`` the kernel has no PYSPARK_PYTHON in its environment (a notebook server's kernels seldom
    have it)."""
    from .kernel import Kernel

    kernel_env: dict[str, str | None] = {k: v for k, v in spark_env(c.workdir).items()
                                         if k.startswith(("SPARK_", "PYSPARK"))}
    if not pyspark_python:
        kernel_env["PYSPARK_PYTHON"] = None
    folder = c.notebooks / name
    folder.mkdir(exist_ok=True)
    kernel = Kernel({**kernel_env, **(env or {}), "JUPYTER_TORCHDIST_WARMUP": "0"}, cwd=str(folder))
    settings = {**session_conf(c.url), "spark.app.name": name, **(conf or {})}
    r = kernel.execute(textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        builder = SparkSession.builder
        for k, v in {settings!r}.items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        %load_ext jupyter_torchdist
        import jupyter_torchdist as jt
        def executors():
            return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    """), timeout=180)
    if r["status"] != "ok":
        kernel.shutdown()
        raise RuntimeError(kernel.text(r))
    return kernel
