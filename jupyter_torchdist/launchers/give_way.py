"""The notebook's own SparkSession stays the notebook's: the embedded session gives way to it.

``%load_ext`` starts the embedded local session in the background so the first cell is fast. pyspark's
``SparkSession.builder...getOrCreate()`` returns any SparkContext that already exists, ignoring the master and
settings asked for, so a session the notebook builds in a later cell would silently be ours. While the extension
is loaded, ``getOrCreate`` first checks: if the embedded session is up (or starting) and the builder asks for
another master (a cluster, another ``local[N]``, a Connect server started here), the embedded session is stopped,
one line says so, and pyspark builds the session asked for. Kept ranks on the embedded session keep it: the line
then says to stop them first.
"""
from __future__ import annotations

import functools
import sys
from typing import Any

from . import spark_session
from .spark_jobs import held_slots

__all__ = ["install", "uninstall"]

_original: Any = None
# Settings read when the JVM starts: the embedded session's JVM is already running, so they cannot apply.
_JVM_LAUNCH = ("spark.driver.memory", "spark.driver.extraJavaOptions", "spark.driver.extraClassPath",
               "spark.driver.extraLibraryPath", "spark.jars", "spark.jars.packages", "spark.jars.repositories")


def _asked_master(builder: Any) -> str | None:
    options = getattr(builder, "_options", {}) or {}
    return options.get("spark.master") or options.get("spark.remote")


def _give_way(builder: Any) -> None:
    """Stop the embedded session if the builder asks for another master and nothing of ours runs on it."""
    asked = _asked_master(builder)
    if not asked or asked.startswith("sc://"):
        return  # "the" session (the embedded one is it), or a remote Connect server (no SparkContext here)
    spark_session.wait_for_warm_up()
    embedded = spark_session.embedded_session()
    if embedded is None or embedded.sparkContext.master == asked:
        return
    if held_slots():
        print(f"jupyter-torchdist: kept ranks run on the embedded local session, so pyspark returns it instead of "
              f"a session on {asked}: stop them first (%distribute_stop), then build your session again.",
              file=sys.stderr)
        return
    spark_session.stop_embedded_session()
    print(f"jupyter-torchdist: stopped its embedded local Spark session so that the one you asked for ({asked}) is "
          "yours; runs now go to it.", file=sys.stderr)
    late = sorted(set(getattr(builder, "_options", {}) or {}) & set(_JVM_LAUNCH))
    if late:
        print(f"jupyter-torchdist: {', '.join(late)} cannot apply: the JVM they configure was started by %load_ext's "
              "background start. Build the session before %load_ext (or set JUPYTER_TORCHDIST_WARMUP=0).",
              file=sys.stderr)


def install() -> None:
    """Wrap ``SparkSession.Builder.getOrCreate`` (idempotent)."""
    global _original
    from pyspark.sql import SparkSession

    if _original is not None:
        return
    _original = SparkSession.Builder.getOrCreate

    @functools.wraps(_original)
    def get_or_create(builder: Any) -> Any:
        try:
            _give_way(builder)
        except Exception:
            pass  # never stand between the notebook and its session
        return _original(builder)

    SparkSession.Builder.getOrCreate = get_or_create  # type: ignore[method-assign,assignment]


def uninstall() -> None:
    global _original
    if _original is None:
        return
    from pyspark.sql import SparkSession

    SparkSession.Builder.getOrCreate = _original  # type: ignore[method-assign]
    _original = None
