"""The notebook's own SparkSession, classic or Spark Connect, as the notebook's main thread sees it (never ours).

Which session a run goes to must not depend on the thread that decides: a background run, a sweep's member or
``run(..., background=True)`` chooses its backend on a thread of its own, where the JVM's active session (kept per
thread: py4j maps each Python thread to a JVM thread of its own) is None even when the notebook built one. So the
session is the one the notebook's main thread last had active (remembered whenever the main thread asks, as every
cell's run does), else the one pyspark's builder last made (``SparkSession.active()``'s fallback), while it lives.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["notebook_session", "own_classic_session", "connect_session", "is_embedded", "mark_ours"]

_seen_on_main: Any = None   # the classic session the main thread last had active
_ours: Any = None           # the embedded session (``embedded.py`` says when it starts and stops)


def notebook_session() -> Any | None:
    """The notebook's own SparkSession (classic or Connect), the same from every thread; None when there is none
    or it is our embedded one. Never starts a session and never imports pyspark: if pyspark is not loaded no
    session can exist, and a ``--local``-only notebook keeps it unloaded."""
    connect = connect_session()
    if connect is not None:
        return connect
    return own_classic_session()


def connect_session() -> Any | None:
    """The notebook's active session if it is a Spark Connect client; None otherwise (and pyspark stays unloaded
    when nothing has loaded it: a Connect session cannot exist without it). The active session is per thread: on
    another thread (a background run's) it is the notebook's default Connect session, as ``SparkSession.active()``
    would find it."""
    if "pyspark" not in sys.modules or "SPARK_CONNECT_MODE_ENABLED" not in os.environ:
        return None
    try:
        from pyspark.sql.connect.session import SparkSession
    except ImportError:
        return None
    default = getattr(SparkSession, "_get_default_session", lambda: None)
    return SparkSession.getActiveSession() or default()


def mark_ours(session: Any) -> None:
    """The embedded session started (``session``) or stopped (None): it is never the notebook's own."""
    global _ours
    _ours = session


def is_embedded(session: Any) -> bool:
    """Whether ``session`` runs on the embedded session's SparkContext (configured by us, not by the notebook); a
    Connect session has no SparkContext and is never ours."""
    ours = _ours
    if ours is None or session is None:
        return False
    try:
        return bool(session.sparkContext is ours.sparkContext)
    except Exception:
        return False


def own_classic_session() -> Any | None:
    """The notebook's own classic SparkSession (not the embedded one), as its main thread sees it, from any thread."""
    session = _classic_session()
    return None if session is None or is_embedded(session) else session


def _classic_session() -> Any | None:
    global _seen_on_main
    sql = sys.modules.get("pyspark.sql")
    if sql is None:
        return None
    cls = sql.SparkSession
    if threading.current_thread() is threading.main_thread():
        try:
            active = cls.getActiveSession()
        except Exception:  # the JVM is starting or gone
            active = None
        if active is not None and _alive(active):
            _seen_on_main = active
            return active
    for session in (_seen_on_main, getattr(cls, "_instantiatedSession", None)):
        if session is not None and _alive(session):
            return session
    return None


def _alive(session: Any) -> bool:
    """Whether a classic session's SparkContext still runs (``spark.stop()`` ends it)."""
    sc = getattr(session, "_sc", None)
    return sc is not None and getattr(sc, "_jsc", None) is not None
