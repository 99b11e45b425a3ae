"""A ``--gpu`` run's preflight on the executors: before the barrier job, a short ordinary job asks the hosts that
will run ranks whether their Python's torch can (a CUDA or ROCm build with NCCL), and, where nobody schedules GPUs
(a Spark Connect server's local master), which GPUs they have.

Why before: a CPU-only torch found in a forked rank fails the run only after every other rank has started and waited;
found here, the run is refused at once, naming the host and its Python. The tasks touch no GPU (a Python worker that
initialised CUDA could no longer fork ranks that use it: ``core.gpus.host_report``). On a classic session the
preflight is a barrier job of the run's own size, placed as the ranks' will be; the executors it reached are known
fit for the rest of this kernel, and a session whose executors are all known fit runs none.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..core.errors import LaunchError

__all__ = ["judge", "preflight_classic", "preflight_connect", "server_gpus", "known_fit"]

_fit: set[tuple[str, str]] = set()  # (executor host as Spark names it, Python) whose torch can run a GPU rank
_REPORT_SCHEMA = "report string"


def known_fit(hosts: Iterable[str], python: str) -> bool:
    """Whether every executor host (with this Python) was found fit before: then no preflight is needed."""
    hosts = list(hosts)
    return bool(hosts) and all((host, python) in _fit for host in hosts)


def judge(reports: list[dict[str, Any]], where: str) -> None:
    """Refuse (LaunchError) when any host's torch cannot run a GPU rank, naming each such host and its Python.
    ``where``: what ran the preflight, for the message ("the executors")."""
    unfit: dict[tuple[str, str], str] = {}
    for report in reports:
        if report.get("unfit"):
            unfit.setdefault((str(report["host"]), str(report["python"])), str(report["unfit"]))
    if unfit:
        hosts = ", ".join(sorted(host for host, _ in unfit))
        raise LaunchError(f"checked on {where} before the run started: {len(unfit)} host(s) cannot run a GPU rank "
                          f"({hosts}).\n" + "\n".join(unfit.values()))


def _classic_task(barrier: bool, _: Any) -> Iterator[str]:
    from pyspark import BarrierTaskContext, TaskContext

    from jupyter_torchdist.core.gpus import host_report

    report = host_report()
    if barrier:  # the executor's host as Spark names it (what the kernel remembers as fit)
        ctx = BarrierTaskContext.get()
        report["executor"] = ctx.getTaskInfos()[ctx.partitionId()].address.rsplit(":", 1)[0]
    else:
        assert TaskContext.get() is not None
    yield json.dumps(report)


def preflight_classic(sc: Any, tasks: int, hosts: list[str], barrier: bool = True) -> None:
    """The run's tasks, each saying what its host can do, before the ranks' barrier job (a barrier job of the same
    size and resources, placed as theirs will be; ordinary tasks under dynamic allocation, which refuses barrier
    jobs); refused when any host cannot run a GPU rank. Nothing runs when every executor host (``hosts``, as
    Spark names them) was found fit before with this Python."""
    python = str(getattr(sc, "pythonExec", ""))
    if known_fit(hosts, python):
        return
    sc.setLocalProperty("spark.job.description", "jupyter-torchdist: the --gpu preflight")
    try:
        rdd = sc.parallelize(range(tasks), tasks)
        rows = (rdd.barrier() if barrier else rdd).mapPartitions(functools.partial(_classic_task, barrier)).collect()
    finally:
        sc.setLocalProperty("spark.job.description", None)
    reports = [json.loads(row) for row in rows]
    judge(reports, "the executors")
    _fit.update((str(r["executor"]), python) for r in reports if r.get("executor"))


def _arrow_task(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    from jupyter_torchdist.core.gpus import host_report

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"report": json.dumps(host_report())}])


def _connect_reports(spark: Any, tasks: int) -> list[dict[str, Any]]:
    rows = spark.range(0, tasks, 1, tasks).mapInArrow(_arrow_task, _REPORT_SCHEMA).collect()
    return [json.loads(row["report"]) for row in rows]


def preflight_connect(spark: Any, tasks: int) -> None:
    """``preflight_classic`` on a Spark Connect session: the server's executors answer, not this kernel."""
    judge(_connect_reports(spark, tasks), "the Spark Connect server's executors")


def server_gpus(spark: Any, n: int, master: str) -> list[str]:
    """A Spark Connect server whose master is local runs the ranks on its own machine, where nobody schedules GPUs:
    its torch and its GPUs decide, not this kernel's. The GPUs the ranks take there, in rank order; refused when its
    torch cannot run a GPU rank or it has fewer than ``n`` GPUs."""
    reports = _connect_reports(spark, 1)
    judge(reports, f"the Spark Connect server ({master})")
    report = reports[0]
    gpus = [str(g) for g in report["gpus"]]
    if len(gpus) < n:
        raise LaunchError(f"--gpu with -n {n} needs {n} GPUs on the Spark Connect server's machine "
                          f"({report['host']}, master {master}), where its local master runs the ranks, but it shows "
                          f"{len(gpus)}. Ask for at most {len(gpus)} ranks, run the server on a machine with more "
                          "GPUs (or set CUDA_VISIBLE_DEVICES in the server's environment), or drop --gpu.")
    return gpus[:n]
