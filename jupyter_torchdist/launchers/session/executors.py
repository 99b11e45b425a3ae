"""What each executor of a classic SparkSession says of itself, for ``jupyter-torchdist doctor``: its host, its
Python, how its packages differ from the kernel's, and whether it reaches this machine where the live channel will
listen. One ordinary task per slot of the session; Spark is asked here, never by the doctor itself."""
from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["executor_facts"]


def _probe(kernel: Mapping[str, str], address: tuple[str, int]) -> Callable[[Any], Iterator[str]]:
    kernel = dict(kernel)

    def probe(_: Any) -> Iterator[str]:
        import socket as s

        from jupyter_torchdist.core.travel import differences, local_versions

        here = local_versions(tuple(k for k in kernel if k not in ("python", "torch", "cloudpickle",
                                                                   "jupyter-torchdist")))
        try:
            s.create_connection(address, timeout=3).close()
            reached = ""
        except OSError as exc:
            reached = f"{type(exc).__name__}: {exc}"
        yield json.dumps({"host": s.gethostname(), "python": sys.executable, "diff": differences(kernel, here),
                          "unreachable": reached})
    return probe


def executor_facts(session: Any, kernel_versions: Mapping[str, str]) -> tuple[str, list[dict[str, Any]]]:
    """(the address the executors were asked to reach, a row per task: host, python, diff, unreachable). A task that
    cannot run at all raises (the executors' Python lacks what it needs)."""
    sc = session.sparkContext
    host = sc.getConf().get("spark.driver.host") or "127.0.0.1"
    listener = socket.create_server((host, 0))
    try:
        n = max(1, int(sc.defaultParallelism))
        probe = _probe(kernel_versions, (host, listener.getsockname()[1]))
        return host, [json.loads(r) for r in sc.parallelize(range(n), n).mapPartitions(probe).collect()]
    finally:
        listener.close()
