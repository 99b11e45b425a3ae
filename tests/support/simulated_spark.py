"""Simulated ranks inside Spark barrier tasks: the Spark launcher's own path (one barrier job on the notebook's
session, its Python workers, the job group an interrupt cancels, the job's end) under hundreds of tasks and a
thousand ranks, on a machine that could not hold as many real ones.

Chosen by ``SimulatedLauncher`` when ``JUPYTER_TORCHDIST_SIMULATE`` has ``tasks=T``: the N ranks are spread over T
barrier tasks (``ceil(N / T)`` each, by partition id), and each task runs them as ``simulated.serve`` does in a
local process. Everything else is the Spark backend's, unchanged: the session (embedded or the notebook's), the slot
check (T slots), TLS when Spark encrypts, the cancel.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

from jupyter_torchdist.core.contract import LaunchInfo, RunPlan
from jupyter_torchdist.core.options import RunOptions
from jupyter_torchdist.launchers.spark import SparkLauncher

__all__ = ["SimulatedSparkLauncher"]


def _sim_task(plan: RunPlan, spec: Any, per_task: int, serve: Callable[[RunPlan, list[int], Any], None],
              _: Any) -> Any:
    """One barrier task: the ranks ``[p * per_task, (p + 1) * per_task)`` of partition ``p``, simulated by
    ``serve`` (``simulated.serve``, handed over by the caller so that this module does not import it back)."""
    from pyspark import BarrierTaskContext

    first = BarrierTaskContext.get().partitionId() * per_task
    serve(plan, list(range(first, min(plan.world_size, first + per_task))), spec)
    yield None


class SimulatedSparkLauncher(SparkLauncher):
    """Simulated ranks, ``ceil(N / tasks)`` in each of ``tasks`` Spark barrier tasks."""

    name = "simulated-spark"

    def __init__(self, spec: Any, serve: Callable[[RunPlan, list[int], Any], None]) -> None:
        super().__init__()
        self.spec, self.serve = spec, serve

    def prepare(self, options: RunOptions) -> LaunchInfo:
        info = super().prepare(options)
        tasks = self.tasks_for(options.n)
        return dataclasses.replace(info, label=f"simulated ranks in {tasks} barrier tasks of {info.label}",
                                   watcher="the Spark task (simulated ranks' agents)")

    def tasks_for(self, ranks: int) -> int:
        return max(1, min(ranks, int(self.spec.tasks)))

    def task(self, plan: RunPlan) -> Callable[[Any], Any]:
        per_task = math.ceil(plan.world_size / self.tasks_for(plan.world_size))
        return functools.partial(_sim_task, plan, self.spec, per_task, self.serve)
