"""Shared helpers for the benchmark scripts: timing, load checks, tables, result files, torchrun."""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Iterable, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
REPO = os.path.dirname(HERE)
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo"}  # torchrun's ranks on the same gloo transport as ours


def register_by_value(module: Any) -> None:
    """Make cloudpickle ship ``module``'s functions by value (Spark workers cannot import benchmarks/)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    try:  # pyspark (TorchDistributor, Spark commands) uses its own vendored copy of cloudpickle
        from pyspark import cloudpickle as spark_cloudpickle

        spark_cloudpickle.register_pickle_by_value(module)
    except ImportError:
        pass


def register_jobs() -> Any:
    """Import jobs.py, shipped by value to every rank."""
    import jobs

    register_by_value(jobs)
    return jobs


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A script's argument parser, with its module docstring as the --help text."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


# -- the machine ---------------------------------------------------------------------------------------
def load1() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(max_load: float | None = None, max_wait_s: float | None = None) -> float:
    """Wait (up to max_wait_s) until the 1-minute load average is below max_load; return it.

    Defaults from BENCH_MAX_LOAD (1.0) and BENCH_WAIT_S (0: do not wait, only report).
    """
    max_load = float(os.environ.get("BENCH_MAX_LOAD", "1.0")) if max_load is None else max_load
    max_wait_s = float(os.environ.get("BENCH_WAIT_S", "0")) if max_wait_s is None else max_wait_s
    deadline = time.time() + max_wait_s
    while True:
        load = load1()
        if load < max_load or time.time() >= deadline:
            if load >= max_load:
                print(f"# WARNING: load average {load:.2f} >= {max_load}: timings are distorted by other work",
                      flush=True)
            return load
        print(f"# load average {load:.2f} >= {max_load}; waiting 30 s", flush=True)
        time.sleep(30)


def machine() -> dict[str, Any]:
    import torch

    try:
        import pyspark
        spark_v = pyspark.__version__
    except ImportError:
        spark_v = None
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = float("nan")
    java = ""
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        java = (out.stderr or out.stdout).splitlines()[0]
    except Exception:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gb": round(mem_gb, 1), "python": platform.python_version(),
            "torch": torch.__version__, "pyspark": spark_v, "java": java, "cuda": torch.cuda.is_available(),
            "kernel": platform.release(), "load_at_start": round(load1(), 2)}


def begin(title: str) -> dict[str, Any]:
    """Wait for a quiet machine, describe it and print the script's header; returns the description."""
    wait_for_quiet()
    info = machine()
    header(title, info)
    return info


def rotated(xs: Sequence[Any], r: int) -> list[Any]:
    """``xs`` started at position ``r`` (round-robin: every item gets every place in the order)."""
    k = r % len(xs)
    return list(xs[k:]) + list(xs[:k])


# -- numbers ---------------------------------------------------------------------------------------------
def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def fmt_s(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.2f}"


def fmt_list(xs: Iterable[float]) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-markdown table (also readable in a terminal)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    out = [line(cells[0]), "| " + " | ".join("-" * w for w in widths) + " |"]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def kv_line(values: dict[str, Any]) -> str:
    parts = []
    for k, v in values.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        parts.append(f"{k}={v}")
    return " ".join(parts)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def save(name: str, data: dict[str, Any]) -> str:
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    data = dict(data, saved_at=time.strftime("%Y-%m-%d %H:%M:%S"), commit=commit(), load_at_end=round(load1(), 2))
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
    return path


def print_targets(values: dict[str, Any], targets: dict[str, float]) -> None:
    """One ``target KEY <= LIMIT: VALUE MET|MISSED`` line per target whose value was measured."""
    for key, limit in targets.items():
        if key in values and values[key] == values[key]:
            verdict = "MET" if values[key] <= limit else "MISSED"
            print(f"target {key} <= {limit}: {values[key]:.4f} {verdict}")


def check_targets(values: dict[str, Any], targets: Sequence[tuple[str, float, bool]]) -> None:
    """One ``target KEY >=|<= LIMIT: VALUE MET|MISSED`` line per (key, limit, higher_is_better)."""
    for key, limit, higher in targets:
        value = values.get(key, float("nan"))
        met = value >= limit if higher else value <= limit
        print(f"target {key} {'>=' if higher else '<='} {limit}: {value:.3f} {'MET' if met else 'MISSED'}")


def finish(name: str, data: dict[str, Any], started: float, kv: dict[str, Any], note: str = "") -> float:
    """Save results/<name>.json with ``total_s`` (in its place if ``data`` has the key, else last), then print
    the closing lines: the total time (and ``note``), and the ``key=value`` line. Returns the total."""
    total = time.perf_counter() - started
    save(name, {**data, "total_s": total})
    print(f"# total {total:.0f} s{note}")
    print(kv_line(kv))
    return total


# -- our runs ----------------------------------------------------------------------------------------------
def warm_up() -> float:
    """The extension's warm-up (what ``%load_ext`` starts), waited for here: its seconds."""
    from jupyter_torchdist.launchers.session import embedded as backend

    return timed(lambda: backend.warm_up_async().join())[0]


def timed_run(spark: Any, fn: Callable[[], Any], n: int) -> tuple[float, Any, dict[str, float]]:
    """``jupyter_torchdist.run(fn, n=n)`` with its phases recorded: (seconds, value, phase groups).

    The JVM's marks are read after the run, outside the time."""
    import phases

    import jupyter_torchdist as jtd

    with phases.record(spark) as rec:
        t0 = time.perf_counter()
        value = jtd.run(fn, n=n)
        seconds = time.perf_counter() - t0
    return seconds, value, rec.groups()


# -- torchrun ----------------------------------------------------------------------------------------------
def torchrun_cmd() -> list[str]:
    """The real torchrun entry point next to this interpreter (not a pyenv shim, which adds ~0.1 s)."""
    exe = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def run_torchrun(job: str, kwargs: dict[str, Any] | None = None, nproc: int = 2,
                 env: dict[str, str] | None = None, timeout: float = 300) -> tuple[float, list[dict[str, Any]]]:
    """torchrun --nproc_per_node N ddp_script.py JOB KWARGS: (wall seconds, every rank's value).

    torch 2.13's ranks sometimes abort in gloo's teardown at exit ("terminate called without an active
    exception"): such a run is run again, once, on a fresh port."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    for attempt in range(2):
        cmd = torchrun_cmd() + ["--nproc_per_node", str(nproc), "--master_port", str(free_port()),
                                os.path.join(HERE, "ddp_script.py"), job, json.dumps(kwargs or {})]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
        wall = time.perf_counter() - t0
        if out.returncode == 0:
            break
        print(f"# torchrun failed ({out.returncode}){'; running it again' if attempt == 0 else ''}", flush=True)
    if out.returncode != 0:
        raise RuntimeError(f"torchrun failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    # the ranks share one pipe, so their lines can interleave: pick out each flat JSON object
    values = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", out.stdout)]
    return wall, sorted(values, key=lambda v: v.get("rank", 0))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commit() -> str:
    """The commit measured (JTD_COMMIT where the checkout has no git, as on a lent GPU machine), with ``+changes``
    when the working tree differs from it."""
    if os.environ.get("JTD_COMMIT"):
        return os.environ["JTD_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              cwd=REPO, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=REPO, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (head or "unknown") + ("+changes" if dirty else "")


def header(title: str, info: dict[str, Any]) -> None:
    """The results file's first lines: what it measures, when, at which commit, on which machine."""
    print(f"# {title}")
    print(f"# measured {time.strftime('%Y-%m-%d %H:%M %Z')} at commit {commit()}")
    print(f"# machine: {info['cpu']} | {info['cores']} cores | {info['mem_gb']} GB | Python {info['python']} | "
          f"torch {info['torch']} | pyspark {info['pyspark']} | {info['java']} | CUDA {info['cuda']} | "
          f"load {info['load_at_start']}", flush=True)


# -- quiet ---------------------------------------------------------------------------------------------------
class fd_silenced:
    """Send fds 1 and 2 (torchrun's and TorchDistributor's chatter) to a log file for a while."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> fd_silenced:
        sys.stdout.flush()
        sys.stderr.flush()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._log = open(self.path, "ab")
        self._saved = [os.dup(1), os.dup(2)]
        os.dup2(self._log.fileno(), 1)
        os.dup2(self._log.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._log.close()


# a real IPython kernel, driven like a front end (re-exported: the benchmarks use common.KernelSession)
from kernel_session import WARM_CELL, KernelSession, alive, descendants  # noqa: E402,F401
