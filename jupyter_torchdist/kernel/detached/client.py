"""The kernel's side of detached runs: ``%%distribute --detach`` hands the run to a runner of its own
(``runner.py``) and returns its handle; ``attach(ID)`` gives any kernel of the same user that handle again.

A ``DetachedRun`` is a ``Handle`` like a background run's ``Run``: ``state``, ``wait()``, ``result()``, ``value``,
``stop()``. A thread of the kernel's follows it while it goes (``POLL_S``): it asks the runner for its state and
latest frame over the runner's socket, draws the frame on the views showing it (the cell's, ``%distribute_attach``'s,
the handle displayed), and once the runner has gone reads the outcome it left (``store.py``): the value, or the
error ``result()`` raises. A kernel that goes away takes only its thread; the run goes on.
"""
from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ...channel import protocol as P
from ...core import contract as C
from ...core.errors import DistributeError, RunError
from ...core.options import RunOptions
from ..handle import Handle, new_id
from .store import MAX_SPEC_BYTES, check_id, clean, held, ids, peer_is_owner, pid_alive, run_folder, socket_path

__all__ = ["DetachedRun", "DetachedSweep", "submit", "submit_sweep", "attach", "detached_runs", "POLL_S", "START_S"]

POLL_S: Final = 0.5     # how often a followed run is asked for its state and frame
START_S: Final = 120.0  # a runner that has not opened its socket by then, and has gone, never will
MAX_ANSWER_BYTES: Final = 64 << 20
_H = TypeVar("_H", bound="DetachedRun")


class DetachedRun(Handle):
    """A run that goes on without its kernel (``%%distribute --detach``): ``state``, ``done()``, ``wait()``,
    ``result()``, ``value``, ``stop()``, displayed as its live view. ``attach(run.id)`` in any kernel of the same
    user gives it again."""

    def __init__(self, run_id: str, title: str = "", n: int | None = None) -> None:
        super().__init__()
        self.id = check_id(run_id)
        self.title, self.n = title, n
        self.where: str | None = None
        self._state = "queued"
        self._frame: dict[str, Any] | None = None
        self._value_: Any = None
        self._lock = threading.Lock()
        self._conn: socket.socket | None = None
        self._views: list[Any] = []
        self._began = time.time()
        self.on_outcome: list[Callable[[DetachedRun], None]] = []
        self._look()   # how it stands now, before the handle is given out
        self._thread = threading.Thread(target=self._follow, name=f"jtd-detached-{self.id}", daemon=True)
        self._thread.start()

    # -- what the notebook asks ----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """queued, running, done, failed or stopped (as its runner says; "lost" when its runner died)."""
        return self._state

    @property
    def value(self) -> Any:
        """Its value once it is done; None before, and when it ended otherwise (``result()`` waits)."""
        return self._value_ if self._state == "done" else None

    @property
    def frame(self) -> dict[str, Any] | None:
        """Its latest frame (the snapshot its view draws), as its runner last said it."""
        return self._frame

    def stop(self, by: str = "run.stop()") -> bool:
        """Stop the run (its runner stops its ranks, as a kernel would). Returns at once; ``wait()`` for the end.
        False when it had already ended."""
        if self.done():
            return False
        answer = self._ask({"t": C.STOP_ASKED, "by": by})
        return bool(answer and answer.get("stopped"))

    def first_frame(self, options: RunOptions) -> None:
        """The frame a view draws before the runner's first (the run is queued: its runner is starting)."""
        from ..state.run import RunState

        state = RunState(options.n, title=self.title, options=options.summary(), started_at=self._began,
                         status="queued", run_id=0, durable_id=self.id, background=True)
        state.notes.append("detached: its runner is starting (the run goes on if this kernel ends)")
        with self._lock:
            self._frame = self._frame or dict(state.snapshot(log_tail=0))

    def show(self, view: Any) -> None:
        """Draw the run on ``view`` from now on (its latest frame at once; its report at the end)."""
        with self._lock:
            self._views.append(view)
            frame, ended = self._frame, self.done()
        if frame is not None:
            view.start(frame)
            if ended:
                view.finish(frame)

    def new_view(self, shell: Any) -> Any:
        """The view it is drawn on in a notebook (a run's live view; a sweep's comparison)."""
        from ...views import make_view

        return make_view(shell, background=True)

    def _ipython_display_(self) -> None:
        from IPython import get_ipython

        shell = get_ipython()
        if getattr(shell, "kernel", None) is not None and not self._views:   # the magic drew one already
            self.show(self.new_view(shell))
        super()._ipython_display_()

    # -- following it ------------------------------------------------------------------------------------------
    def _follow(self) -> None:
        """Ask every ``POLL_S``; a runner this kernel started is looked at as soon as it exits (its outcome is
        written then), not up to ``POLL_S`` later."""
        exited = _exits.get(self.id)
        while not self.done():
            if exited is not None and exited.wait(POLL_S):
                exited = None   # once: a runner gone without an outcome is lost at the next look
            elif exited is None:
                time.sleep(POLL_S)
            self._look()

    def _look(self) -> None:
        answer = self._ask({"t": C.LOOK})
        if answer is not None:
            self._news(answer)
        else:
            self._collect()

    def _news(self, answer: dict[str, Any]) -> None:
        state, frame = answer.get("state"), answer.get("frame")
        with self._lock:
            first = self._frame is None and frame is not None
            self._state = state if isinstance(state, str) and state in ("queued", "running") else self._state
            self.where = answer.get("where") or self.where
            self.title = answer.get("title") or self.title
            self.n = answer.get("n") or self.n
            if isinstance(frame, dict):
                self._frame = frame
            views = list(self._views)
        for view in views:
            _draw(view, frame, first)
        self._redisplay()

    def _collect(self) -> bool:
        """The runner is not answering: its outcome if it left one (True: the handle has ended), or the run's loss
        if its runner has gone without one; False while the runner may still be starting or answering."""
        outcome = _read_outcome(self.id)
        if outcome is None:
            if self._may_still_answer():
                return False
            outcome = {"state": "failed", "frame": self._frame, "value": None, "error": None, "lost": True}
        self._end_with(outcome)
        return True

    def _may_still_answer(self) -> bool:
        """Its runner is alive, or has not said it started yet and was handed the run less than ``START_S`` ago
        (or is this kernel's own child, still starting)."""
        top = held()
        if top is None:
            return False
        with top:
            try:
                with run_folder(top, self.id) as folder:
                    runner = folder.read("runner.json")
                    handed = folder.mtime("spec.pkl") or 0.0
            except OSError:
                return False
        if isinstance(runner, dict):
            return pid_alive(runner.get("pid"))
        return _spawned_alive(self.id) or time.time() - handed < START_S

    def _end_with(self, outcome: dict[str, Any]) -> None:
        import cloudpickle

        error: BaseException | None = None
        value = None
        if outcome.get("lost"):
            error = RunError(f"detached run {self.id}: its runner ended without saying how the run ended (killed, or "
                              "out of memory): its ranks went with it. Its log: "
                              f"{_log_path(self.id)}")
        elif outcome.get("error"):
            error = _loads_error(outcome["error"])
        elif outcome.get("value") is not None:
            try:
                value = cloudpickle.loads(outcome["value"])
            except Exception as exc:
                error = DistributeError(f"the value of detached run {self.id} could not be unpickled here "
                                        f"({type(exc).__name__}: {exc}): import what it needs first, then attach again")
        said = outcome.get("state")
        state: str = said if isinstance(said, str) else "failed"
        with self._lock:
            self._value_, self._error = value, error
            self._state = "lost" if outcome.get("lost") else ("failed" if error is not None and state == "done"
                                                               else state)
            frame = outcome.get("frame") if isinstance(outcome.get("frame"), dict) else self._frame
            self._frame = frame
            self.where = outcome.get("where") or self.where
            self.title = outcome.get("title") or self.title
            self.n = outcome.get("n") or self.n
            views = list(self._views)
        for view in views:
            if frame is not None:
                _draw(view, frame, first=False, final=True)
        for hook in self.on_outcome:
            try:
                hook(self)
            except Exception as exc:
                print(f"jupyter-torchdist warning: after detached run {self.id}: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
        self._end()

    # -- the runner's socket --------------------------------------------------------------------------------------
    def _ask(self, request: C.RunnerRequest) -> dict[str, Any] | None:
        """The runner's answer, or None when it is not there (not yet, or no longer)."""
        with self._lock:
            try:
                conn = self._conn or self._connect()
                if conn is None:
                    return None
                P.send_frame(conn, request)
                answer = P.recv_frame(conn, MAX_ANSWER_BYTES)
                return answer if isinstance(answer, dict) else None
            except (OSError, EOFError, P.ProtocolError):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                return None

    def _connect(self) -> socket.socket | None:
        top = held()
        if top is None:
            return None
        with top:
            try:
                folder = run_folder(top, self.id)
            except OSError:
                return None
            with folder:
                if not folder.exists("sock"):
                    return None
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    conn.settimeout(30.0)
                    conn.connect(socket_path(folder))
                    if not peer_is_owner(conn):
                        raise ConnectionRefusedError("the socket's process is another user's")
                except OSError:
                    conn.close()
                    return None
        self._conn = conn
        return conn

    # -- how it shows --------------------------------------------------------------------------------------------
    def _value(self) -> Any:
        return self._value_

    def _name(self) -> str:
        return f"detached run {self.id}"

    def __repr__(self) -> str:
        where = f" on {self.where}" if self.where else ""
        return f"<DetachedRun ({self.id}) {self.title}{where}: {self._state}>"


class DetachedSweep(DetachedRun):
    """A sweep that goes on without its kernel (``--detach`` with ``--sweep``, or ``sweep(fn, space, detach=True)``):
    its runner runs the search, the early stopping and the study as a kernel would. ``rows()``, ``results()``,
    ``best()`` besides a ``DetachedRun``'s verbs; ``result()`` is ``rows()``; displayed, its comparison view."""

    @property
    def value(self) -> Any:
        """Its rows once it has ended (whatever the members' outcomes); None before."""
        return self.rows() if self.done() and self._error is None else None

    def rows(self) -> list[dict[str, Any]]:
        """A dict per member, as ``Sweep.rows()`` gives them once the sweep has ended (its runner kept them); while
        it goes, each member's parameters, state, step and last metrics from its latest frame."""
        if self.done() and isinstance(self._value_, tuple):
            return [dict(r) for r in self._value_[0]]
        frame = self._frame or {}
        return [{**dict(r.get("params") or {}), "state": r.get("state"), "step": r.get("step"),
                 **dict(r.get("metrics") or {}), "run": r.get("id")} for r in frame.get("runs") or []]

    def results(self) -> Any:
        """``rows()`` as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def best(self) -> dict[str, Any] | None:
        """The best finished member's row (the sweep's ``--metric``/``--mode``), once the sweep has ended; None
        before, or when no member finished."""
        if self.done() and isinstance(self._value_, tuple) and self._value_[1] is not None:
            return dict(self._value_[1])
        return None

    def new_view(self, shell: Any) -> Any:
        from ...views.compare import SweepView

        return SweepView()

    def first_frame(self, options: RunOptions) -> None:
        """The comparison its view draws before the runner's first frame: no member yet, the plan."""
        import math

        from ...core.search_options import search_kind
        from ..sweeps.comparison import SweepFacts, sweep_snapshot

        kind = search_kind(options)
        trials = math.prod(len(e) for _, e in options.sweep if isinstance(e, tuple)) if kind == "grid" else \
            options.trials or 1
        facts = SweepFacts(options.metric, options.mode, kind, options.early_stop, trials, options.sweep)
        frame = dict(sweep_snapshot(self.title, [name for name, _ in options.sweep], [], {}, self._began,
                                    self._began, options.concurrent, facts))
        with self._lock:
            self._frame = self._frame or frame

    def _value(self) -> Any:
        return self.rows()

    def _name(self) -> str:
        return f"detached sweep {self.id}"

    def __repr__(self) -> str:
        return f"<DetachedSweep ({self.id}) {self.title}: {self._state}>"


def _draw(view: Any, frame: dict[str, Any] | None, first: bool, final: bool = False) -> None:
    if frame is None:
        return
    try:
        if first:
            view.start(frame)
        if final:
            view.finish(frame)
        elif not first:
            view.update(frame)
    except Exception:
        pass   # a view whose front end went away: the run is followed all the same


def _read_outcome(run_id: str) -> dict[str, Any] | None:
    top = held()
    if top is None:
        return None
    with top:
        try:
            with run_folder(top, run_id) as folder:
                data = folder.read_bytes("outcome.pkl", MAX_SPEC_BYTES)
        except OSError:
            return None
    if data is None:
        return None
    outcome = pickle.loads(data)  # written by this user's runner into an owner-only folder
    return outcome if isinstance(outcome, dict) else None


def _loads_error(data: bytes) -> BaseException:
    import cloudpickle

    try:
        error = cloudpickle.loads(data)
    except Exception as exc:
        return RunError(f"the run failed, and its error could not be unpickled here ({type(exc).__name__}: {exc})")
    return error if isinstance(error, BaseException) else RunError(str(error))


def _log_path(run_id: str) -> str:
    top = held()
    return str((top.path if top is not None else "?") / run_id / "runner.log") if top is not None else "runner.log"


_spawned: dict[str, subprocess.Popen[bytes]] = {}
_exits: dict[str, threading.Event] = {}   # set when the runner this kernel started has exited


def _spawned_alive(run_id: str) -> bool:
    proc = _spawned.get(run_id)
    return proc is not None and proc.poll() is None


# -- handing a run over --------------------------------------------------------------------------------------------
def submit(work: Any, options: RunOptions, view: Any = None) -> DetachedRun:
    """Hand ``work`` to a runner of its own and return its handle at once (``view``: the cell's, drawn from the
    runner's frames while this kernel lives)."""
    return _shown(DetachedRun(_hand_over(work, options, None), work.title, options.n), options, view)


def submit_sweep(work: Any, options: RunOptions, view: Any = None, *, as_globals: bool) -> DetachedSweep:
    """``submit`` for a sweep over ``options.sweep``: ``work`` is its cell (``as_globals``: each member's parameters
    set as the cell's globals) or its function (given as keyword arguments)."""
    run_id = _hand_over(work, options, "globals" if as_globals else "kwargs")
    return _shown(DetachedSweep(run_id, work.title, options.n), options, view)


def _shown(run: _H, options: RunOptions, view: Any) -> _H:
    if view is not None:
        run.first_frame(options)
        run.show(view)
    return run


def _hand_over(work: Any, options: RunOptions, sweep: str | None) -> str:
    """The run's spec written where only its user reads it, and its runner started; the run's id."""
    from ..pickling import pack

    from ...launchers import detach_target

    connect_url = detach_target(options)
    packed = pack(work.fn, work.args, work.kwargs, max_bytes=options.max_payload_bytes)
    run_id = new_id()
    spec = {"format": 1, "id": run_id, "title": work.title, "filename": work.filename, "source": work.source,
            "payload": packed.data, "modules": sorted(packed.modules), "options": options,
            "sys_path": [p for p in sys.path if isinstance(p, str)], "cwd": os.getcwd(),
            "notebook": os.environ.get("JPY_SESSION_NAME") or None, "submitted": time.time(),
            "connect_url": connect_url, "sweep": sweep}
    top = held(create=True)
    assert top is not None
    with top:
        _clean_quietly(top)
        with run_folder(top, run_id, create=True) as folder:
            folder.write_bytes("spec.pkl", pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL))
            folder.write("about.json", {"kind": "sweep" if sweep else "run", "title": work.title, "n": options.n})
            log = os.open("runner.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600,
                          dir_fd=folder.fd)
            try:
                _spawned[run_id] = subprocess.Popen(
                    [sys.executable, "-m", "jupyter_torchdist._detached", run_id], stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            finally:
                os.close(log)
    _exits[run_id] = threading.Event()
    threading.Thread(target=_reap, args=(run_id,), name=f"jtd-detached-reap-{run_id}", daemon=True).start()
    return run_id


def _reap(run_id: str) -> None:
    _spawned[run_id].wait()
    _exits[run_id].set()


def _clean_quietly(top: Any) -> None:
    try:
        clean(top)
    except Exception:
        pass


def attach(run_id: str) -> DetachedRun:
    """The handle of detached run ``run_id`` (``run.id``), from any kernel of the same user: ``state``, ``wait()``,
    ``result()``, ``value``, ``stop()``; displayed, its live view. Raises ``LookupError`` when no such run is kept
    (never started here, or ended more than seven days ago)."""
    run_id = check_id(run_id)
    top = held()
    known = False
    if top is not None:
        with top:
            known = top.exists(run_id)
    if not known:
        raise LookupError(f"no detached run {run_id} is kept for this user: jupyter_torchdist.runs(detached=True) "
                          "lists those that are (an ended run's value is kept seven days)")
    return _handle(run_id)


def _handle(run_id: str) -> DetachedRun:
    """A ``DetachedSweep`` for a sweep's id (its folder's about.json says so), else a ``DetachedRun``."""
    about: Any = None
    top = held()
    if top is not None:
        with top:
            try:
                with run_folder(top, run_id) as folder:
                    about = folder.read("about.json")
            except OSError:
                about = None
    return DetachedSweep(run_id) if isinstance(about, dict) and about.get("kind") == "sweep" else DetachedRun(run_id)


def detached_runs() -> list[DetachedRun]:
    """Every detached run kept for this user, oldest first (each a handle, as ``attach`` gives it)."""
    top = held()
    if top is None:
        return []
    with top:
        found = ids(top)
    return [_handle(run_id) for run_id in found]
