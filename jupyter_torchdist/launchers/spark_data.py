"""The data plane of a classic SparkSession: where ``batches()`` data tasks run beside the ranks, and how."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .spark_jobs import error_summary, held_slots, submit_job
from .spark_session import conf_of, slots_available

__all__ = ["SparkDataPlane"]


def _local_cores(master: str) -> int | None:
    if not master.startswith("local"):
        return None
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0].strip()
    cores = os.cpu_count() or 1
    return cores if first == "*" else min(cores, int(first)) if first.isdigit() else cores


class SparkDataPlane:
    """Data tasks of one SparkSession (the DataFrame's own)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._sc = session.sparkContext
        self.master: str = self._sc.master
        self.local: bool = self.master.startswith("local")  # executors on the kernel's host

    def session(self) -> Any:
        return self._session

    def conf(self) -> dict[str, str]:
        return conf_of(self._sc)

    def data_slots(self) -> int:
        """Task slots a data task can use: with GPU scheduling, every core of every executor (data tasks ask
        for no GPU); otherwise the session's task slots."""
        conf = self.conf()
        if not conf.get("spark.task.resource.gpu.amount") or self.local:
            return slots_available(self._session)
        executors = max(0, int(self._sc._jsc.sc().getExecutorMemoryStatus().size()) - 1)  # less the driver
        cores = int(conf.get("spark.executor.cores", "1") or 1) // max(1, int(conf.get("spark.task.cpus", "1") or 1))
        return executors * cores

    def free_slots(self, ranks_in_slots: int) -> int:
        return self.data_slots() - held_slots() - ranks_in_slots

    def default_workers(self, ranks: int, free: int) -> int:
        """The session's task slots beyond the ranks' (``free``); on a local master, its cores beyond the
        ranks'. At least 1."""
        cores = _local_cores(self.master)
        return max(1, (cores - ranks) if cores is not None else free)

    def submit(self, job: Callable[[], None], lane: str) -> None:
        submit_job(job, lane=lane)

    def describe(self, exc: BaseException) -> str:
        return error_summary(exc)

    def cancel(self, group: str) -> None:
        try:
            self._sc.cancelJobGroup(group)
        except Exception:
            pass
