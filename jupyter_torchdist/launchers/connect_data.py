"""The data plane of a Spark Connect session: ``batches()`` data tasks as DataFrame operations, no RDDs.

A Connect client has no local properties and cannot run one partition of a job, so each piece is its own
operation: the source filtered to the piece's partition (``spark_partition_id()``), mapped with the piece
inside the producer. Operations carry the data job's tag (thread-local in the client), which is what
``cancel`` interrupts.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .connect import connect_conf
from .spark_data import PlaneBase, partition_counts
from .spark_jobs import held_slots, submit_job
from .session.embedded import local_slots

__all__ = ["ConnectDataPlane"]


class ConnectDataPlane(PlaneBase):
    """Data tasks of one Spark Connect session (the DataFrame's own)."""

    def __init__(self, session: Any) -> None:
        self._spark = session
        self.master: str = connect_conf(session, "spark.master") or "a Spark Connect server"
        self.local: bool = self.master.startswith("local")
        self.grows = False  # ranks refuse a dynamic-allocation server behind Connect (barrier tasks)

    def session(self) -> Any:
        return self._spark

    def conf(self) -> dict[str, str]:
        return {}  # a Connect client reads settings one by one; the data job needs none of them

    def free_slots(self, ranks_in_slots: int) -> int:
        slots = local_slots(self.master)
        if slots is None:  # a cluster behind Connect does not say: its default parallelism is the best guess
            slots = int(connect_conf(self._spark, "spark.default.parallelism") or 2) + ranks_in_slots
        return slots - held_slots() - ranks_in_slots

    def submit(self, job: Callable[[], None], lane: str) -> None:
        submit_job(job, lane=f"connect-{lane}")

    def cancel(self, group: str) -> None:
        try:
            self._spark.interruptTag(group)
        except Exception:
            pass

    def begin(self, group: str, what: str) -> None:
        self._spark.addTag(group)

    def end(self, group: str) -> None:
        try:
            self._spark.removeTag(group)
        except Exception:
            pass

    def partitions(self, df: Any) -> int | None:
        return None  # known once counted

    def count_rows(self, df: Any, counter: Callable[[Any], Any]) -> list[int]:
        from pyspark.sql import functions as F

        return partition_counts(df.select(F.lit(1).alias("one")).mapInArrow(counter, "p long, n long").collect())

    def piece_runner(self, source: Any, make_producer: Callable[[dict[str, Any] | None], Any], schema: str,
                     piece_property: str) -> Callable[[dict[str, Any]], str]:
        from pyspark.sql import functions as F

        def run(piece: dict[str, Any]) -> str:
            part = source.where(F.spark_partition_id() == int(piece["partition"]))
            rows = part.mapInArrow(make_producer(piece), schema).collect()
            if not rows:
                raise RuntimeError(f"the data task for partition {piece['partition']} returned no status")
            return str(rows[0]["status"])

        return run
