"""A real IPython kernel driven like a front end, for the benchmarks that time cells, and the process-tree
helpers that wait until everything a kernel started is gone."""
from __future__ import annotations

import os
import queue as _q
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WARM_CELL = "from jupyter_torchdist.launchers.session.embedded import warm_up_async as _w\n_w().join()"


class KernelSession:
    """One ipykernel, driven like a front end: run cells, time request -> idle, count iopub messages."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        from jupyter_client.manager import KernelManager

        full_env = dict(os.environ)
        full_env.update(env or {})
        t0 = time.perf_counter()
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=full_env, cwd=REPO)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.start_s = time.perf_counter() - t0

    def run(self, code: str, timeout: float = 300) -> dict[str, Any]:
        """Execute a cell; seconds from the execute request to the kernel going idle again."""
        return self.run_all([code], timeout)

    def run_all(self, cells: list[str], timeout: float = 300) -> dict[str, Any]:
        """Send every cell without waiting (as Run All does); seconds until the last is idle, the last one's value,
        and the iopub messages of them all by type. The first cell that raised raises here."""
        t0 = time.perf_counter()
        ids = [self.kc.execute(code) for code in cells]
        counts: dict[str, int] = {}
        error = None
        result = None
        idle: set[str] = set()
        while len(idle) < len(ids):
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except _q.Empty:
                if time.perf_counter() - t0 > timeout:
                    raise TimeoutError(f"cell did not finish in {timeout} s: {cells[-1][:60]!r}") from None
                continue
            parent = msg["parent_header"].get("msg_id")
            if parent not in ids:
                continue
            kind = msg["msg_type"]
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "error":
                error = error or "\n".join(msg["content"]["traceback"])
            elif kind == "execute_result" and parent == ids[-1]:
                result = msg["content"]["data"].get("text/plain")
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                idle.add(parent)
        seconds = time.perf_counter() - t0
        if error:
            raise RuntimeError(f"cell failed:\n{error}")
        return {"seconds": seconds, "result": result, "iopub": counts}

    def load_extension(self) -> tuple[float, float]:
        """``%load_ext jupyter_torchdist``, then wait for its background warm-up: (seconds of the
        ``%load_ext`` cell, seconds until the warm-up is done)."""
        t0 = time.perf_counter()
        load_ext_s = self.run("%load_ext jupyter_torchdist")["seconds"]
        self.run(WARM_CELL)
        return load_ext_s, time.perf_counter() - t0

    def close(self, wait_s: float = 120.0) -> float:
        """Shut the kernel down and wait until every process it started (JVM, Python daemon, workers) is
        gone, so that none of them eats CPU during the next measurement. Returns the seconds waited."""
        pid = None
        try:
            pid = self.km.provisioner.process.pid  # type: ignore[union-attr]
        except Exception:
            pass
        family = descendants(pid) if pid else set()
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=False)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < wait_s and any(alive(p) for p in family):
            time.sleep(0.2)
        return time.perf_counter() - t0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendants(root: int) -> set[int]:
    """Every live descendant of process ``root``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    out: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out
