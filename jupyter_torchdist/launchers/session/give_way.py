"""One session whenever the notebook asks for one: the embedded session, unless the notebook asks for another.

While the extension is loaded, ``SparkSession.builder...getOrCreate()`` first checks what the builder asks for.

* **Nothing of its own** (no master, no remote, no setting only a new JVM could take: ``.appName(...)``, runtime
  SQL settings): it gets the notebook's embedded session, started now if nothing started it yet, waited for if it
  is starting, its runtime settings applied, and made the active session, whenever the builder runs (right after
  ``%load_ext``, while the warm-up runs, after). Without this, pyspark would start a ``local[*]`` session of its
  own when the builder ran before the embedded one was up (2 task slots here), and the embedded one later.
* **Another master** (a cluster, another ``local[N]``, a Connect server started here) **or JVM settings** (driver
  memory, Java options, jars): the embedded session and the JVM started for it are stopped, one line says so, and
  pyspark builds the session asked for in a JVM of its own, as it would without the extension: none of the embedded
  session's settings reach it, and its JVM settings apply. Background runs and sweeps on the embedded session are
  waited for first (one line names them; an interrupt stops the waiting and changes nothing). Kept ranks on the
  embedded session keep it: the line then says to stop them first.
"""
from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any

from . import autostart, embedded, jvm as spark_jvm
from ..spark_jobs import held_slots

__all__ = ["install", "uninstall", "runs_on_embedded"]

_original: Any = None
# The kernel's background runs and sweeps that may use the embedded session, in words ("run 3"); set by the kernel
# when the extension loads (the launchers do not know the kernel's runs).
runs_on_embedded: Callable[[], list[str]] = lambda: []
# Settings read when the JVM starts: the embedded session's JVM is already running, so they cannot apply.
_JVM_LAUNCH = ("spark.driver.memory", "spark.driver.extraJavaOptions", "spark.driver.extraClassPath",
               "spark.driver.extraLibraryPath", "spark.jars", "spark.jars.packages", "spark.jars.repositories")


def _embedded_for(builder: Any) -> Any:
    """The embedded session for a builder that asks for nothing of its own (else None): started or waited for."""
    options = dict(getattr(builder, "_options", {}) or {})
    if _asked_master(builder) or set(options) & set(_JVM_LAUNCH) or not autostart.allowed() \
            or not autostart.java_available():
        return None
    session, is_embedded = embedded.get_session()  # waits for a start under way
    if not is_embedded:
        return None  # the notebook has a session of its own: pyspark returns it
    autostart.wanted()  # its Python workers warm up in the background
    for key, value in options.items():
        if key != "spark.app.name":
            try:
                session.conf.set(key, value)  # as pyspark does for a session that exists
            except Exception:
                print(f"jupyter-torchdist: {key} cannot change on the running embedded session; build the session "
                      "before %load_ext (or set JUPYTER_TORCHDIST_WARMUP=0) for it to apply", file=sys.stderr)
    embedded.activate(session)
    return session


def _asked_master(builder: Any) -> str | None:
    options = getattr(builder, "_options", {}) or {}
    return options.get("spark.master") or options.get("spark.remote")


def _give_way(builder: Any) -> None:
    """Stop the embedded session and its JVM if the builder asks for another master or JVM settings and nothing of
    ours needs them (background runs waited for; kept ranks keep them)."""
    asked = _asked_master(builder)
    late = sorted(set(getattr(builder, "_options", {}) or {}) & set(_JVM_LAUNCH))
    if (not asked and not late) or (asked or "").startswith("sc://"):
        return  # "the" session (the embedded one is it), or a remote Connect server (no SparkContext here)
    embedded.wait_for_warm_up()
    session = embedded.embedded_session()
    if not spark_jvm.jvm_is_ours() or (session is not None and asked and session.sparkContext.master == asked
                                       and not late):
        return  # a JVM the notebook started itself: pyspark decides, as without the extension
    if held_slots():
        print(f"jupyter-torchdist: kept ranks run on the embedded local session, so pyspark returns it instead of "
              f"a session on {asked or ', '.join(late)}: stop them first (%distribute_stop), then build your session "
              "again.", file=sys.stderr)
        return
    _wait_for_runs()
    embedded.stop_embedded_session(jvm=True)
    print(f"jupyter-torchdist: stopped its embedded local Spark session and its JVM so that the session you asked "
          f"for ({asked or ', '.join(late)}) starts as it would without the extension; runs now go to it.",
          file=sys.stderr)


def _wait_for_runs(poll_s: float = 0.2) -> None:
    """Background runs and sweeps on the embedded session end first (an interrupt ends the wait, not them)."""
    busy = runs_on_embedded()
    if not busy:
        return
    print(f"jupyter-torchdist: waiting for {', '.join(busy)} on the embedded Spark session to end before it makes "
          "way for yours (interrupt to stop waiting; nothing changes)", file=sys.stderr, flush=True)
    while runs_on_embedded():
        time.sleep(poll_s)


def install() -> None:
    """Wrap ``SparkSession.Builder.getOrCreate`` (idempotent)."""
    global _original
    from pyspark.sql import SparkSession

    if _original is not None:
        return
    _original = SparkSession.Builder.getOrCreate

    @functools.wraps(_original)
    def get_or_create(builder: Any) -> Any:
        if embedded.building():
            return _original(builder)  # our own start of the embedded session
        try:
            session = _embedded_for(builder)
            if session is not None:
                return session
            _give_way(builder)
        except Exception:
            pass  # never stand between the notebook and its session
        session = _original(builder)
        if not embedded.is_embedded(session):
            autostart.own_session_built()
        return session

    SparkSession.Builder.getOrCreate = get_or_create  # type: ignore[method-assign,assignment]


def uninstall() -> None:
    global _original
    if _original is None:
        return
    from pyspark.sql import SparkSession

    SparkSession.Builder.getOrCreate = _original  # type: ignore[method-assign]
    _original = None
