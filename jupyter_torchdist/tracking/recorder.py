"""What a tracked run puts on record, written by the kernel (never by the ranks: one record per run, not per rank).

``RunRecorder`` follows one run: ``begin`` when its turn comes (the options, a sweep member's values), ``tap`` for
every message of its ranks (rank 0's ``report(...)`` numbers by step; each rank's ``--profile`` trace, written
under the run's folder), ``end`` once its handle has its outcome (state, ranks, hosts, backend, the error's first
line, the ranks' step rates, the saved report, the code that ran and the value's text). ``SweepRecorder`` is a
sweep's parent record; its members' records name it, and its end names the best member. Every record goes into a
journal on local disk first (``journal.py``) and reaches its trackers from the shipper's threads (``shipper.py``):
the run never waits for a tracker. Where each tracker records, and what it adds to a run's record (MLflow's context
tags), is resolved here, when the run is recorded (``sinks.py``).
"""
from __future__ import annotations

import html
import inspect
import math
import os
import statistics
import time
from collections.abc import Mapping
from typing import Any, Final

from ..core import contract as C
from ..core.contract import Inbound
from ..core.profile_summary import trace_name
from ..core.options import RunOptions
from ..core.track_options import DEFAULT_LOGDIR
from ..core.space import describe_space
from ..views.report_html import html_of
from ..views.schema import RunSnapshot
from ..views.trim import trim_snapshot
from ..core.trackers import REGISTRY
from .journal import Journal
from .names import experiment_name, folder_name, member_name, params_label
from .sinks import destinations, extras
from .shipper import shipper

__all__ = ["RunRecorder", "SweepRecorder", "STATUS"]

STATUS = {"done": "FINISHED", "failed": "FAILED", "stopped": "KILLED", "pruned": "KILLED", "stopped_early": "KILLED"}
EARLY: Final = ("pruned", "stopped_early")   # a sweep member its rule stopped early (both names the handles use)


def _base(options: RunOptions) -> str:
    return os.path.abspath(os.path.expanduser(options.logdir or DEFAULT_LOGDIR))


def _number(value: Any) -> float | None:
    """A reported number as trackers store it: NaN and infinities included (MLflow, TensorBoard and W&B keep them)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _finite(value: Any) -> float | None:
    number = _number(value)
    return number if number is not None and math.isfinite(number) else None


def _open(options: RunOptions) -> Journal:
    """A journal for a run's (or a sweep's) records, its destinations resolved now, in this kernel."""
    to = destinations(options.track, options)
    return shipper().open_journal(options.track, (to.get("mlflow") or {}).get("uri"), to)


def _files(options: RunOptions) -> bool:
    """Whether a tracker of the run keeps files in a folder per run (TensorBoard)."""
    return any(REGISTRY[name].files for name in options.track)


class SweepRecorder:
    """A sweep's parent record: begun with the sweep, ended when its last member has."""

    def __init__(self, options: RunOptions, title: str) -> None:
        self.options, self.title = options, title
        self.key = f"sweep-{os.urandom(6).hex()}"
        self.started = time.time()
        self.folder = os.path.join(_base(options), folder_name("sweep", None, self.started))
        self.journal: Journal | None = None
        self.members: dict[int, str] = {}   # a member's run number -> its record's key
        if options.track:
            self.journal = _open(options)

    def begin(self) -> None:
        o = self.options
        params: dict[str, Any] = {"space": describe_space(o.sweep), "search": o.search or "", "metric": o.metric,
                                  "mode": o.mode, "early_stop": o.early_stop, "trials": o.trials, "n": o.n,
                                  "concurrent": o.concurrent}
        self._append({"k": "run", "key": self.key, "parent": None, "experiment": experiment_name(o.experiment),
                      "name": self.title, "params": {k: v for k, v in params.items() if v not in (None, "")},
                      "tags": {"jtd.kind": "sweep"}, "at": int(self.started * 1000),
                      "folder": self.folder if _files(o) else None, "for": extras(o.track)})

    def end(self, rows: list[dict[str, Any]], stopped: bool) -> None:
        """The sweep's last member ended: its counts and its best member's metric."""
        metric, mode = self.options.metric, self.options.mode
        states = [str(r.get("state")) for r in rows]
        tags: dict[str, Any] = {f"jtd.members_{s}": states.count(s) for s in set(states)}
        finals = [(v, r) for r in rows if (v := _finite(r.get(f"{metric}_final"))) is not None]
        pts = []
        now = int(time.time() * 1000)
        best_key = None
        if finals:
            value, best = (min if mode == "min" else max)(finals, key=lambda p: p[0])
            tags["jtd.best"] = params_label({name: best.get(name) for name, _ in self.options.sweep})
            tags["jtd.best_metric"] = f"best_{metric}"
            number = best.get("run")
            best_key = self.members.get(number) if isinstance(number, int) else None
            pts.append([f"best_{metric}", value, 0, now])
        self._append({"k": "end", "key": self.key, "status": "KILLED" if stopped else "FINISHED", "tags": tags,
                      "pts": pts, "files": [], "at": now, "best": best_key})
        if self.journal is not None:
            self.journal.close()
            shipper().wake()

    def _append(self, record: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.append(record)


class RunRecorder:
    """One run's record (``--track``) and its ``--profile`` traces."""

    def __init__(self, run: Any, work: Any, options: RunOptions, parent: SweepRecorder | None = None) -> None:
        self.run, self.work, self.options, self.parent = run, work, options, parent
        self.key = f"run-{os.urandom(6).hex()}"
        params = run.params or {}
        self.folder: str | None = None
        if _files(options) or options.profile is not None:
            self.folder = (os.path.join(parent.folder, member_name(run.number, params)) if parent is not None
                           else os.path.join(_base(options), folder_name("run", run.number, run.submitted_at)))
        self.journal: Journal | None = None
        if options.track:
            self.journal = parent.journal if parent is not None else _open(options)
            run.record_key = self.key   # its handle's tracking (each tracker's run)
            if parent is not None:
                parent.members[run.number] = self.key
        self.traces: list[str] = []
        self._reports = 0
        self.began = False

    @property
    def shown_folder(self) -> str | None:
        """The run's folder as the view says it: relative to the notebook's folder when it is under it."""
        if self.folder is None:
            return None
        here = os.getcwd()
        return os.path.relpath(self.folder, here) if self.folder.startswith(here + os.sep) else self.folder

    def note(self) -> str | None:
        """What the view says of the run's record."""
        said = []
        for name in self.options.track:
            tracker = REGISTRY[name]
            if tracker.files:
                said.append(f"{tracker.title} ({self.shown_folder})")
            elif tracker.experiment is not None:
                kind = tracker.experiment.split()[-1]   # "the MLflow experiment" -> experiment
                said.append(f"{tracker.title} ({kind} {self._experiment(name)!r})")
            else:
                said.append(tracker.title)
        return f"recorded in {' and '.join(said)}" if said else None

    def _experiment(self, name: str) -> str:
        env = REGISTRY[name].experiment_env
        if env and not self.options.experiment and os.environ.get(env):
            return os.environ[env]
        return experiment_name(self.options.experiment)

    # -- the run's course ---------------------------------------------------------------------------------
    def begin(self) -> None:
        run, o = self.run, self.options
        self.began = True
        params = {**{k: v for k, v in o.summary().items() if v not in (None, False)}, **(run.params or {})}
        name = params_label(run.params) if run.params else f"run {run.number}: {run.title}"[:250]
        self._append({"k": "run", "key": self.key, "parent": self.parent.key if self.parent else None,
                      "experiment": experiment_name(o.experiment), "name": name, "params": params,
                      "tags": {"jtd.kind": "member" if self.parent else "run", "jtd.run": run.number},
                      "at": int(time.time() * 1000), "folder": self.folder if _files(o) else None,
                      "for": extras(o.track)})

    def tap(self, ev: Inbound) -> None:
        """A message of the run's ranks (the supervisor's thread): rank 0's numbers, a rank's profile."""
        t = ev.msg.get("t")
        if t == C.PROGRESS and ev.rank == 0 and self.journal is not None:
            msg: Any = ev.msg
            self._reports += 1
            step = msg.get("step")
            step = step if isinstance(step, int) and not isinstance(step, bool) else self._reports
            ms = int((msg.get("at") or ev.at) * 1000)
            pts = [[str(k), v, step, ms] for k, raw in (msg.get("metrics") or {}).items()
                   if (v := _number(raw)) is not None]
            if pts:
                self.journal.append({"k": "m", "key": self.key, "pts": pts})
        elif t == C.PROFILE and self.folder is not None:
            self._trace(ev.rank, ev.msg.get("trace"))

    def _trace(self, rank: int, data: Any) -> None:
        if not isinstance(data, bytes) or self.folder is None:
            return
        path = os.path.join(self.folder, trace_name(rank))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            self.traces.append(path)
        except OSError:
            pass  # the summary still stands; the report says where the trace would be

    def end(self) -> None:
        """The run's handle has its outcome: the last record, with the files to keep (a run that never began, stopped
        while queued, has none)."""
        if self.journal is None or not self.began:
            return
        run = self.run
        details = run.details
        state = getattr(details, "state", None)
        tags: dict[str, Any] = {"jtd.state": run.state}
        pts: list[list[Any]] = []
        now = int(time.time() * 1000)
        snap = trim_snapshot(state.snapshot()) if state is not None else None
        if state is not None and snap is not None:
            hosts = sorted({r.host for r in state.ranks if r.host})
            tags.update({"jtd.ranks": state.world_size, "jtd.hosts": ",".join(hosts)[:5000],
                         "jtd.backend": state.backend})
            pts += _rates(state, now) + _profile_points(snap["profile"], now)
        if run.error is not None:
            tags["jtd.error"] = (str(run.error).strip().splitlines() or [type(run.error).__name__])[0][:1000]
        if run.state in EARLY:
            tags["jtd.pruned"] = "true"
        lost = self.journal.dropped.get(self.key)
        if lost:
            tags["jtd.points_not_kept"] = lost   # past the journal's bound
        files = self._files(state, snap)
        self.journal.append({"k": "end", "key": self.key, "status": STATUS.get(run.state, "FINISHED"), "tags": tags,
                             "pts": pts, "files": files, "at": now})
        if self.parent is None:
            self.journal.close()
        shipper().wake()

    def _files(self, state: Any, snap: RunSnapshot | None) -> list[list[str | None]]:
        assert self.journal is not None
        folder = self.journal.file_folder(self.key)
        out: list[list[str | None]] = []

        def keep(name: str, text: str) -> None:
            path = os.path.join(folder, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            out.append([path, None])

        if state is not None and snap is not None:
            title = html.escape(snap["title"])
            keep("report.html", f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>"
                 f"<body>\n{html_of(snap)}\n</body></html>\n")
            if state.value_repr is not None:
                keep("value.txt", state.value_repr + "\n")
        for name, text in _code(self.work):
            keep(name, text if text.endswith("\n") else text + "\n")
        out += [[path, "profile"] for path in self.traces]
        return out

    def _append(self, record: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.append(record)


def _code(work: Any) -> list[tuple[str, str]]:
    """What ran, as files: a cell's source (``cell.py``), a script under its own name (as it was read when the run
    began: ``rank.script.Script``), else a function's own source (``source.py``) when Python can find it. Nothing of
    this package's own wrappers."""
    if getattr(work, "source", ""):
        return [("cell.py", work.source)]
    fn = getattr(work, "fn", None)
    path, source = getattr(fn, "path", None), getattr(fn, "source", None)
    if isinstance(path, str) and isinstance(source, str):
        return [(os.path.basename(path), source)]
    if not inspect.isfunction(fn) or str(getattr(fn, "__module__", "")).startswith("jupyter_torchdist"):
        return []
    try:
        return [("source.py", inspect.getsource(fn))]
    except (OSError, TypeError):
        return []   # defined where Python keeps no source


def _rates(state: Any, ms: int) -> list[list[Any]]:
    """The ranks' step rates at the end (steps a second): the median rank's, and the slowest's. A rank's own rate
    when it ran long enough to have one, else its steps over its time."""
    rates = [rate for r in state.ranks if (rate := _rate(r)) is not None]
    if not rates:
        return []
    step = max((r.step or 0) for r in state.ranks)
    return [["jtd.step_rate_median", statistics.median(rates), step, ms],
            ["jtd.step_rate_slowest", min(rates), step, ms]]


def _rate(r: Any) -> float | None:
    if isinstance(r.rate, (int, float)) and r.rate > 0:
        return float(r.rate)
    if r.step and r.started_at is not None and r.ended_at is not None and r.ended_at > r.started_at:
        return (r.step + 1) / (r.ended_at - r.started_at)
    return None


def _profile_points(profile: Mapping[str, Any] | None, ms: int) -> list[list[Any]]:
    """Each rank's shares, as metrics (``profile.rank1.input``): runs compared side by side in MLflow."""
    if not profile:
        return []
    return [[f"profile.rank{row['rank']}.{kind}", float(row[kind]), 0, ms] for row in profile["ranks"]
            for kind in ("input", "compute", "comm", "other") if row["steps"]]
