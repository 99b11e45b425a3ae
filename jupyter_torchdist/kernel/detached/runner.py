"""``python -m jupyter_torchdist._detached ID``: one detached run, from the spec its kernel left to its outcome,
in a process of its own.

The kernel starts it in a session of its own, so a kernel's restart, crash or shutdown does not reach it; it is the
run's supervisor (its ranks' channel ends here, not in the kernel), drives it as a kernel drives a background run
(``RunDriver.life``), and lists it in the runs panel as a kernel of its own ("detached-ID": the panel's and
``jupyter-torchdist stop``'s requests reach it). Any kernel of its user attaches through its socket (``client.py``):
``look`` gives the run's state and latest frame, ``stop`` stops it. When the run ends it writes the outcome (value or
error, last frame) for a kernel to collect, saves the report beside the notebook, and exits: it outlives its run by
nothing, and it never waits for a kernel.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from ...channel import protocol as P
from ...core import contract as C
from ...core.held_folder import Held
from .store import MAX_SPEC_BYTES, check_id, held, notebook_report_path, peer_is_owner, run_folder, socket_path

__all__ = ["main", "Frames", "FORMAT"]

FORMAT: Final = 1   # the spec's and the outcome's layout


class Frames:
    """The run's view in the runner: nobody draws it here, it keeps the latest frame for the kernels that attach."""

    def __init__(self) -> None:
        from ...views.trim import REPORT

        self.log_tail = REPORT.log_lines   # what a saved report keeps: an attached view shows as much
        self.last: dict[str, Any] | None = None
        self.final = False

    @property
    def focus(self) -> frozenset[int]:
        return frozenset()

    def start(self, snapshot: dict[str, Any]) -> None:
        self.last = dict(snapshot)

    def update(self, snapshot: dict[str, Any]) -> None:
        self.last = dict(snapshot)

    def finish(self, snapshot: dict[str, Any]) -> None:
        self.last, self.final = dict(snapshot), True


Publish = Callable[[str, "str | None"], Any]   # (kernel id, notebook) -> the panel's publisher (``close(by)``), or None


def main(argv: list[str] | None = None, publish: Publish | None = None) -> int:
    """Drive the run named on the command line; 0 once its outcome is written, whatever the outcome. ``publish``
    lists it in the runs panel (``jupyter_torchdist._detached``, the runner's front door, hands it in)."""
    args = sys.argv[1:] if argv is None else argv
    run_id = check_id(args[0] if args else "")
    top = held()
    if top is None:
        print(f"no detached runs' folder: run {run_id} was not handed over", file=sys.stderr)
        return 2
    with top, run_folder(top, run_id) as folder:
        spec = _spec(folder)
        _warm_up(spec)
        folder.write("runner.json", {"pid": os.getpid(), "started": time.time()})
        frames = Frames()
        handle, go = _sweep(spec, frames) if spec.get("sweep") else _run(spec, frames)
        server = _Server(folder, handle, frames)
        publisher = _publish(publish, run_id, spec)
        signal.signal(signal.SIGTERM, lambda *_: handle.stop("SIGTERM to its runner"))
        try:
            go()
        except BaseException:
            pass   # the outcome says it
        _write_outcome(folder, handle, frames, sweep=bool(spec.get("sweep")))
        _save_report(spec, run_id, frames)
        _send_records()
        server.close()
        if publisher is not None:
            publisher.close("its runner's end")
    return 0


def _send_records() -> None:
    """--track: the runner's record of the run reaches its trackers before the runner exits (its shipper's thread
    would die with it; TensorBoard's files would lack the run's end until a kernel sent it)."""
    if "jupyter_torchdist.tracking.shipper" in sys.modules:   # only a tracked run started one
        from ...tracking.shipper import send_before_exit

        send_before_exit()


def _spec(folder: Held) -> dict[str, Any]:
    data = folder.read_bytes("spec.pkl", MAX_SPEC_BYTES)
    if data is None:
        raise SystemExit("the run's spec is not there (or not a file of this user's)")
    spec: dict[str, Any] = pickle.loads(data)  # written by a kernel of this user into an owner-only folder
    if spec.get("format") != FORMAT:
        raise SystemExit(f"a spec of format {spec.get('format')!r}: this runner reads {FORMAT}")
    for path in reversed(spec["sys_path"]):   # the notebook's imports resolve as in its kernel
        if path not in sys.path:
            sys.path.insert(0, path)
    return spec


def _warm_up(spec: Mapping[str, Any]) -> None:
    """A run on local processes: their server starts importing torch now (nearly all of the runner's start), while
    the runner imports the rest of itself, as ``%load_ext`` starts it first in a kernel."""
    from ...launchers import backend_for, stand_in, warm_up_on

    options = spec["options"]
    if spec.get("connect_url") or not warm_up_on():
        return
    if backend_for(options).name == "local" or stand_in(options) is not None:
        from ...launchers.local_server import get_zygote

        get_zygote()


def _run(spec: Mapping[str, Any], frames: Frames) -> tuple[Any, Callable[[], Any]]:
    """The run's handle (with the id its kernel gave it) and what drives it, as a kernel makes a background run's."""
    from ..pickling import Packed
    from ..runs.driver import RunDriver, Work
    from ..runs.history import new_run
    from ...tracking import recorder_for

    _join(spec)
    options = spec["options"]
    work = Work(_not_here, title=spec["title"], filename=spec["filename"], source=spec["source"])
    run = new_run(spec["title"], options)
    run.id, run.submitted_at = spec["id"], spec["submitted"]
    driver = RunDriver(run, Packed(spec["payload"], frozenset(spec["modules"])), options, work, frames,
                       recorder=recorder_for(run, work, options))
    driver.show_waiting(None)
    return run, lambda: driver.life(deadline=None)


def _sweep(spec: Mapping[str, Any], frames: Frames) -> tuple[Any, Callable[[], Any]]:
    """The sweep, started as its kernel would start it (its search, its judge, its study): each member's run carries
    the kernel's packed cell or function as it came (``PackedCall``), with the member's parameters."""
    from ..runs.driver import Work
    from ..sweeps.start import start_sweep
    from ...rank.sweep_params import PackedCall

    _join(spec)
    payload, modules, as_globals = spec["payload"], frozenset(spec["modules"]), spec["sweep"] == "globals"

    def work(params: dict[str, Any]) -> Work:
        return Work(PackedCall(payload, dict(params), as_globals), title=spec["title"], filename=spec["filename"],
                    source=spec["source"], ships=modules)

    sweep = start_sweep(work, spec["options"], frames, spec["title"])
    sweep.id = spec["id"]
    return sweep, sweep.wait


def _join(spec: Mapping[str, Any]) -> None:
    if spec.get("connect_url"):   # the notebook's Spark Connect session: this process is one more client of it
        from ...launchers import join_connect

        join_connect(spec["connect_url"])


def _not_here(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a detached run's code travels packed: its runner never calls it")


def _publish(publish: Publish | None, run_id: str, spec: Mapping[str, Any]) -> Any:
    """The run in the runs panel and ``jupyter-torchdist runs``, as the only run of a kernel named for it."""
    if publish is None:
        return None
    try:
        return publish(f"detached-{run_id}", spec.get("notebook"))
    except Exception:
        return None   # the run goes on without the panel


def _write_outcome(folder: Held, handle: Any, frames: Frames, *, sweep: bool = False) -> None:
    """How the run ended, for a kernel to collect: its state, its value (pickled as the ranks sent it, by value)
    or its error, its last frame; a sweep's rows (a row per member, as ``Sweep.rows()``) and its best row."""
    import cloudpickle

    outcome: dict[str, Any] = {"format": FORMAT, "state": handle.state, "ended": time.time(),
                               "frame": frames.last, "where": getattr(handle, "where", None), "title": handle.title,
                               "n": handle.options.n, "value": None, "error": None}
    if sweep:
        outcome.update(_sweep_outcome(handle))
    else:
        outcome["ended"], outcome["summary"] = handle.ended_at or outcome["ended"], handle.summary()
        try:
            outcome["value"] = cloudpickle.dumps(handle.value) if handle.state == "done" else None
        except Exception as exc:
            outcome["state"], outcome["error"] = "failed", _error_bytes(RuntimeError(
                f"the run succeeded, but its value could not be kept for a kernel to collect ({type(exc).__name__}: "
                f"{exc}): return something picklable, or save it from rank 0 (torch.save) and return its path"))
    error = getattr(handle, "error", None)
    if error is not None:
        outcome["error"] = _error_bytes(error)
    folder.write_bytes("outcome.pkl", pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))


def _sweep_outcome(sweep: Any) -> dict[str, Any]:
    """A sweep's rows and best row, pickled by value; a member's value that cannot be kept reads as its repr."""
    import cloudpickle

    rows = sweep.rows()
    try:
        best = sweep.best()
    except Exception:
        best = None
    number = getattr(best, "number", None)
    params = getattr(best, "params", None)
    best_row = next((r for r in rows if number is not None and r.get("run") == number), None) or \
        next((r for r in rows if params and all(r.get(k) == v for k, v in params.items())), None)
    try:
        data = cloudpickle.dumps((rows, best_row))
    except Exception:
        kept = [{k: (v if k != "value" else repr(v)) for k, v in r.items()} for r in rows]
        data = cloudpickle.dumps((kept, next((r for r in kept if best_row and r.get("run") == best_row.get("run")),
                                             None)))
    return {"value": data}


def _error_bytes(error: BaseException) -> bytes:
    """The run's error as the collecting kernel raises it: its class, headline, failures and notes, without the
    run's whole result (every rank's log lives in the frame)."""
    import cloudpickle

    held_result = getattr(error, "result", None)
    try:
        if held_result is not None:
            error.result = None  # type: ignore[attr-defined]
        return bytes(cloudpickle.dumps(error))
    except Exception:
        from ...core.errors import RunError

        return bytes(cloudpickle.dumps(RunError(f"{type(error).__name__}: {error}")))
    finally:
        if held_result is not None:
            error.result = held_result  # type: ignore[attr-defined]


def _save_report(spec: Mapping[str, Any], run_id: str, frames: Frames) -> None:
    """The report, beside the notebook that started the run (as an HTML page of its own)."""
    path = notebook_report_path(spec.get("notebook"), spec["cwd"], run_id)
    if path is None or frames.last is None:
        return
    from ...views.compare import sweep_html
    from ...views.report_html import report_html

    try:
        body = (sweep_html if spec.get("sweep") else report_html)(frames.last)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(f"<!doctype html><meta charset='utf-8'><title>{spec['title'][:80]}</title>{body}\n")
        os.replace(tmp, path)
    except Exception as exc:
        print(f"the report could not be saved at {path}: {type(exc).__name__}: {exc}", file=sys.stderr)


class _Server:
    """The runner's socket: only its owner's processes are answered (``peer_is_owner``)."""

    def __init__(self, folder: Held, run: Any, frames: Frames) -> None:
        self.run, self.frames, self.folder = run, frames, folder   # a Run, or a Sweep
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        folder.remove("sock")
        old = os.umask(0o077)
        try:
            self.sock.bind(socket_path(folder))
        finally:
            os.umask(old)
        self.sock.listen(16)
        threading.Thread(target=self._accept, name="jtd-detached-server", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not peer_is_owner(conn):
                conn.close()   # another user: not a word
                continue
            threading.Thread(target=self._serve, args=(conn,), name="jtd-detached-client", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    ask = P.recv_frame(conn, C.MAX_REQUEST_BYTES)
                    P.send_frame(conn, self._answer(ask))
                except (OSError, EOFError, P.ProtocolError):
                    return

    def _answer(self, ask: Any) -> C.LookAnswer | C.StopAnswer | dict[str, str]:
        kind = ask.get("t") if isinstance(ask, dict) else None
        if kind == C.LOOK:
            return {"state": self.run.state, "frame": self.frames.last, "where": getattr(self.run, "where", None),
                    "title": self.run.title, "n": self.run.options.n, "final": self.frames.final}
        if kind == C.STOP_ASKED:
            by = ask.get("by")
            return {"stopped": bool(self.run.stop(by if isinstance(by, str) and by else "an attached kernel"))}
        return {"error": f"unknown request {kind!r}"}

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.folder.remove("sock")

