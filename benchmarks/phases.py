"""Per-phase timestamps of our runs, for every benchmark that runs ours (hooks in this process only).

    import phases
    phases.install()
    with phases.record(spark) as rec:
        jupyter_torchdist.run(fn, n=2)
    rec.groups()   # {"prepare": s, "submit": s, ...}

Hooks: the supervisor's event handler (``kernel.supervisor.Supervisor.handle``: each message from
each rank and agent, stamped on arrival), the Spark launcher's prepare/start
(``launchers.spark.SparkLauncher``) and the job it submits to its job thread; after the run, Spark's
status store adds the JVM's own times (job submitted, tasks launched/ended, job completed). Cost: a
few µs per message.
"""
from __future__ import annotations

import contextlib
import cProfile
import time
from typing import Any, Callable, Iterator

_installed = False
CURRENT: Recorder | None = None

# coarse phases from kernel-side and JVM marks only (no probe in the ranks): (name, from, to)
GROUPS = [
    ("prepare", "kernel:call", "kernel:prepared"),
    ("submit", "kernel:prepared", "jvm:job_submitted"),
    ("schedule", "jvm:job_submitted", "jvm:last_task_launch"),
    ("task->agent", "jvm:last_task_launch", "last:agent:connected"),
    ("rank start", "last:agent:connected", "last:rank:state_running"),
    ("cell", "last:rank:state_running", "last:rank:result"),
    ("rank exit", "last:rank:result", "last:agent:exit"),
    ("task/job end", "last:agent:exit", "backend:job_end"),
    ("return", "backend:job_end", "kernel:returned"),
]
GROUP_NOTES = {
    "prepare": "launcher.prepare: session, slot and conf checks (py4j)",
    "submit": "pyspark builds the barrier RDD and command, JVM accepts the job",
    "schedule": "DAG scheduler: job submitted -> last task launched",
    "task->agent": "Python worker takes the task, unpickles it, forks the rank, agent connects",
    "rank start": "rank connects, TCPStore rendezvous, init_process_group",
    "cell": "the cell (plus unpacking it and pickling its value)",
    "rank exit": "process exit (the group goes with it), agent reports",
    "task/job end": "Spark task and job completion, collect() returns",
    "return": "kernel settles and returns the value",
}


class Recorder:
    def __init__(self, spark: Any = None) -> None:
        self.spark = spark
        self.raw: list[tuple[float, str]] = []
        self.run_id = ""
        self.marks: dict[str, float] = {}
        self.job_profile: cProfile.Profile | None = None
        self.profile_job = False

    def mark(self, name: str, at: float | None = None) -> None:
        self.raw.append((time.time() if at is None else at, name))

    def finish(self) -> None:
        m: dict[str, float] = {}
        for at, name in self.raw:
            m.setdefault(name, at)
            role, _, what = name.partition(":")
            base = role.rstrip("0123456789")
            if base in ("rank", "agent") and base != role:
                key = f"last:{base}:{what}"
                m[key] = max(m.get(key, at), at)
        if self.spark is not None:
            m.update(jvm_marks(self.spark))
        self.marks = m

    def groups(self) -> dict[str, float]:
        return {name: self.marks[b] - self.marks[a] for name, a, b in GROUPS if a in self.marks and b in self.marks}

    def total(self) -> float:
        return self.marks.get("kernel:returned", float("nan")) - self.marks.get("kernel:call", float("nan"))


@contextlib.contextmanager
def record(spark: Any = None, profile_job: bool = False) -> Iterator[Recorder]:
    global CURRENT
    install()
    rec = Recorder(spark)
    rec.profile_job = profile_job
    CURRENT = rec
    rec.mark("kernel:call")
    try:
        yield rec
    finally:
        rec.mark("kernel:returned")
        CURRENT = None
        rec.finish()


def install() -> None:
    """Hook the supervisor and the Spark launcher in this process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    _hook_supervisor()
    _hook_launcher()


def _hook_supervisor() -> None:
    """Stamp every message from every rank and agent (and the launcher's) as the run loop takes it."""
    from jupyter_torchdist.kernel.runs.supervisor import Supervisor

    orig_handle = Supervisor.handle

    def handle(self: Any, ev: Any) -> None:
        rec = CURRENT
        if rec is not None:
            t = ev.msg.get("t")
            if t == "state":
                t = f"state_{ev.msg.get('state')}"
            rec.mark(f"{ev.role}{'' if ev.rank < 0 else ev.rank}:{t}", ev.at)
        orig_handle(self, ev)

    Supervisor.handle = handle  # type: ignore[method-assign]


def _timed_job(rec: Recorder | None, job: Callable[[], None]) -> Callable[[], None]:
    """``job`` for the Spark job thread, marking its begin and end (and cProfiling it if asked)."""
    def timed_job() -> None:
        if rec is not None:
            rec.mark("jobthread:begin")
            if rec.profile_job:
                rec.job_profile = cProfile.Profile()
                rec.job_profile.enable()
        try:
            job()
        finally:
            if rec is not None:
                if rec.job_profile is not None:
                    rec.job_profile.disable()
                rec.mark("jobthread:end")
    return timed_job


def _hook_launcher() -> None:
    """Mark the Spark launcher's prepare and start, and wrap the job that start submits."""
    from jupyter_torchdist.launchers import spark

    # the wrapped prepare is looked up at call time, so an experiment can swap it
    spark.SparkLauncher._bench_prepare = spark.SparkLauncher.prepare  # type: ignore[attr-defined]
    orig_start = spark.SparkLauncher.start

    def prepare(self: Any, options: Any) -> Any:
        rec = CURRENT
        rec and rec.mark("kernel:prepare")
        out = type(self)._bench_prepare(self, options)
        rec and rec.mark("kernel:prepared")
        return out

    def start(self: Any, plan: Any, inbox: Any) -> None:
        rec = CURRENT
        if rec is not None:
            rec.mark("kernel:start")
            rec.run_id = plan.run_id
        orig_submit = spark.submit_job
        spark.submit_job = lambda job, lane="runs": orig_submit(_timed_job(rec, job), lane)
        try:
            orig_start(self, plan, inbox)
        finally:
            spark.submit_job = orig_submit

    spark.SparkLauncher.prepare = prepare  # type: ignore[method-assign]
    spark.SparkLauncher.start = start  # type: ignore[method-assign]


def _opt_s(opt: Any) -> float | None:
    try:
        return opt.get().getTime() / 1000.0 if opt.isDefined() else None
    except Exception:
        return None


def jvm_marks(spark: Any) -> dict[str, float]:
    """Spark's own view of its last job (epoch seconds, ms resolution): submitted, tasks, completed."""
    out: dict[str, float] = {}
    try:
        store = spark.sparkContext._jsc.sc().statusStore()
        last = None
        it = store.jobsList(None).iterator()
        while it.hasNext():
            j = it.next()
            if last is None or j.jobId() > last.jobId():
                last = j
        if last is None:
            return out
        if (t := _opt_s(last.submissionTime())) is not None:
            out["jvm:job_submitted"] = t
        if (t := _opt_s(last.completionTime())) is not None:
            out["jvm:job_completed"] = t
        sid = last.stageIds().head()
        it = store.taskList(sid, 0, 10000).iterator()
        launches, ends = [], []
        while it.hasNext():
            td = it.next()
            launch = td.launchTime().getTime() / 1000.0
            launches.append(launch)
            if td.duration().isDefined():
                ends.append(launch + td.duration().get() / 1000.0)
        if launches:
            out["jvm:first_task_launch"] = min(launches)
            out["jvm:last_task_launch"] = max(launches)
        if ends:
            out["jvm:last_task_end"] = max(ends)
    except Exception:
        pass
    return out


def median_groups(recs: list[dict[str, float]]) -> dict[str, float]:
    import statistics

    names = [g[0] for g in GROUPS]
    return {n: statistics.median([r[n] for r in recs if n in r]) for n in names if any(n in r for r in recs)}
