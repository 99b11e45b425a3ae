"""The kernel's side of the runs panel: a thread that keeps this kernel's file in the registry and takes requests.

Started by ``%load_ext jupyter_torchdist`` (``start``), it looks every ``TICK_S`` while a run is going (every
``IDLE_S`` otherwise): it takes the requests left in the kernel's asks folder (stop a run or a sweep, as its own
``stop()`` would; write a report now), and rewrites the kernel's file when the list changed, at most once every
``WRITE_S`` (and every ``registry.HEARTBEAT_S`` so readers know it lives). It never runs code in the notebook's
namespace, never prints (a thread's output would land in whatever cell runs), and a failure costs only the panel:
the last one is kept in ``problem``. At exit (or unload) it stops the runs still going, as the kernel would, and
writes its file a last time with ``ended`` set.
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Final

from .asks import Inbox
from ..core.held_folder import Held, registry_dir
from .kernel_runs import KernelRuns, latest_frame
from .registry import (FORMAT, HEARTBEAT_S, VERSION, KernelRecord, RunEntry, check_kernel_id, clean, kernel_file,
                       reports_dir)
from .reports import Reports

__all__ = ["Publisher", "start", "stop", "current", "kernel_identity", "TICK_S", "IDLE_S", "WRITE_S"]

TICK_S: Final = 0.25     # a stop from the panel is taken within this while a run is going
IDLE_S: Final = 1.0      # ... and within this when none is
WRITE_S: Final = 0.5     # the kernel's file is rewritten at most this often


def kernel_identity(shell: Any) -> tuple[str, str | None]:
    """This kernel's id (its connection file is ``kernel-<id>.json``) and its notebook's path (``JPY_SESSION_NAME``,
    which the Jupyter server sets for a notebook's kernel). Outside a Jupyter kernel: ``ipython-<pid>``."""
    path = None
    if getattr(shell, "kernel", None) is not None:
        try:
            from ipykernel.kernelapp import IPKernelApp

            path = IPKernelApp.instance().connection_file if IPKernelApp.initialized() else None
        except Exception:
            path = None
    stem = os.path.splitext(os.path.basename(path or ""))[0]
    kernel_id = stem[len("kernel-"):] if stem.startswith("kernel-") else stem   # another launcher's file name: its stem
    try:
        check_kernel_id(kernel_id)
    except ValueError:
        kernel_id = f"ipython-{os.getpid()}"
    return kernel_id, os.environ.get("JPY_SESSION_NAME") or None


def _kernel_runs() -> list[Any]:
    from ..kernel.runs.history import runs

    return list(runs())


class Publisher:
    """One kernel's publisher (``start`` makes the one of this process)."""

    def __init__(self, folder: Path, kernel_id: str, notebook: str | None) -> None:
        self.folder, self.kernel_id = folder, kernel_id
        self.file = kernel_file(folder, kernel_id)
        self.registry = Held(folder)   # the folder checked now is the one written to, whatever its name comes to hold
        self.runs = KernelRuns(kernel_id, notebook)
        self.inbox = Inbox(folder, kernel_id)
        self.reports = Reports(reports_dir(folder, kernel_id))
        self.started = time.time()
        self.problem: str | None = None
        self.writes = 0
        self._last_text = ""
        self._last_write = 0.0
        self._quiet: tuple[int, int] | None = None   # (runs, going) when the last write found nothing going
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jupyter-torchdist-runs-panel", daemon=True)

    def start(self) -> Publisher:
        self.write(self._entries(_kernel_runs()))
        self._thread.start()
        return self

    # -- the loop --------------------------------------------------------------------------------
    def _loop(self) -> None:
        wait = TICK_S
        while not self._stopped.wait(wait):
            try:
                wait = TICK_S if self.tick() else IDLE_S
                self.problem = None
            except Exception as exc:   # the panel goes without this kernel's news; the kernel goes on
                self.problem = f"{type(exc).__name__}: {exc}"
                wait = IDLE_S

    def tick(self, now: float | None = None) -> bool:
        """One look: requests, then the file if the list changed. True while a run (or a request) is going."""
        now = time.time() if now is None else now
        asked = self.inbox.take()
        all_runs = _kernel_runs()
        for ask in asked:
            self._answer(ask, all_runs)
        going = sum(1 for r in all_runs if not r.done())
        heartbeat = now - self._last_write >= HEARTBEAT_S
        if going == 0 and self._quiet == (len(all_runs), 0) and not asked and not heartbeat:
            return False   # nothing moved since the last write
        if now - self._last_write < WRITE_S and not asked and not heartbeat:
            return True
        self.write(self._entries(all_runs), now, force=heartbeat)
        self._quiet = (len(all_runs), 0) if going == 0 else None
        return going > 0 or bool(asked)

    def _entries(self, all_runs: list[Any]) -> list[RunEntry]:
        entries = self.runs.entries(all_runs)
        by_id = {r.id: r for r in all_runs}
        for e in entries:
            target = e["id"]
            if e["state"] in ("done", "failed", "stopped", "stopped_early") and not self.reports.final(target):
                if e["kind"] == "run":
                    self.reports.run_ended(target, latest_frame(by_id[target]))
                else:
                    self.reports.sweep_ended(target, self.runs.sweep_by_id(target))
            e["report"] = self.reports.where(target)
        self.reports.keep_only({e["id"] for e in entries})
        return entries

    def _answer(self, ask: dict[str, Any], all_runs: list[Any]) -> None:
        """A request names a run's (or sweep's) durable id: one this kernel does not own is refused (ignored), so a
        stale panel row or an id from an earlier kernel process never stops a run of this one."""
        target, by = str(ask["target"]), str(ask.get("by") or "the runs panel")
        sweep = self.runs.sweep_by_id(target)
        if sweep is not None:
            if ask["kind"] == "stop":
                sweep.stop()
            else:
                self.reports.wanted(target, None, sweep)
            return
        run = next((r for r in all_runs if r.id == target), None)
        if run is not None and ask["kind"] == "stop":
            run.stop(by)
        elif run is not None:
            self.reports.wanted(target, latest_frame(run))

    # -- the file --------------------------------------------------------------------------------
    def record(self, entries: list[RunEntry], now: float, ended: float | None = None) -> KernelRecord:
        return {"format": FORMAT, "version": VERSION, "kernel_id": self.kernel_id, "pid": os.getpid(),
                "host": socket.gethostname(), "notebook": self.runs.notebook, "started": self.started,
                "updated": now, "ended": ended, "entries": entries}

    def write(self, entries: list[RunEntry], now: float | None = None, *, force: bool = False,
              ended: float | None = None) -> bool:
        """Rewrite the kernel's file when its entries changed (or ``force``); True when it wrote."""
        now = time.time() if now is None else now
        text = json.dumps(entries, sort_keys=True, default=str)
        if text == self._last_text and not force and ended is None:
            return False
        self.registry.write(self.file.name, self.record(entries, now, ended))
        self._last_text, self._last_write = text, now
        self.writes += 1
        return True

    # -- the end ---------------------------------------------------------------------------------
    def close(self, by: str = "the kernel's shutdown") -> None:
        """The kernel exits: stop the runs still going (as the kernel itself is about to), and say in the file that
        this kernel has ended; its file and reports stay a while (``jupyter-torchdist runs --all``)."""
        if self._halt():
            try:
                from ..kernel.runs.history import stop_all

                stop_all(by)
                self.write(self._entries(_kernel_runs()), ended=time.time())
                self.inbox.close()
                self.reports.close()
                self.registry.close()
            except Exception as exc:
                self.problem = f"{type(exc).__name__}: {exc}"

    def forget(self) -> None:
        """The extension is unloaded while the kernel lives on: its runs go on, unlisted (no file, no requests)."""
        if self._halt():
            self.inbox.close()
            self.reports.close()
            self.registry.remove(self.file.name)
            self.registry.remove_tree(self.reports.path.name)
            self.registry.close()

    def _halt(self) -> bool:
        if self._stopped.is_set():
            return False
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        return True


class _One:
    publisher: Publisher | None = None
    hook: Any = None


def current() -> Publisher | None:
    """This kernel's publisher, if the extension started one."""
    return _One.publisher


def start(shell: Any) -> Publisher | None:
    """Start this kernel's publisher (once); None when the registry's folder cannot be used (the panel then does
    without this kernel: the notebook itself is unaffected)."""
    if _One.publisher is not None:
        return _One.publisher
    try:
        folder = registry_dir(create=True)
        assert folder is not None
        # Old kernels' files go on a thread of their own: reading a day's kernels (a thousand files after a busy
        # day, 0.8 s) is not a cost of %load_ext.
        threading.Thread(target=_clean_quietly, args=(folder,), name="jtd-registry-clean", daemon=True).start()
        kernel_id, notebook = kernel_identity(shell)
        publisher = Publisher(folder, kernel_id, notebook)
    except Exception:   # whatever is in the folder, loading the extension goes on (without the panel)
        return None
    _One.hook = lambda info: publisher.runs.cell_started(info, time.time())
    shell.events.register("pre_run_cell", _One.hook)
    _One.publisher = publisher.start()
    return publisher


CLEAN_EVERY_S: Final = 600.0  # old kernels' files are looked for at most this often, whichever kernel loads


def _clean_quietly(folder: Path) -> None:
    """Remove old kernels' files, unless a kernel did in the last ``CLEAN_EVERY_S`` (a notebook server starting ten
    kernels reads the folder once, not ten times)."""
    stamp = folder / ".cleaned"
    try:
        if time.time() - stamp.stat().st_mtime < CLEAN_EVERY_S:
            return
    except OSError:
        pass
    try:
        stamp.touch()
        clean(folder)
    except Exception:
        pass  # whatever is in the folder, the next kernel tries again


def stop(shell: Any) -> None:
    """Unload: this kernel leaves the registry (its runs go on; the notebook still has them)."""
    publisher, _One.publisher = _One.publisher, None
    if _One.hook is not None:
        try:
            shell.events.unregister("pre_run_cell", _One.hook)
        except ValueError:
            pass
        _One.hook = None
    if publisher is not None:
        publisher.forget()


@atexit.register
def _at_exit() -> None:
    if _One.publisher is not None:
        _One.publisher.close()
