"""The notebook's own SparkSession, classic or Spark Connect, as pyspark itself would find it (never ours)."""
from __future__ import annotations

import sys
from typing import Any

from ..connect import connect_session
from .embedded import is_embedded

__all__ = ["notebook_session"]


def notebook_session() -> Any | None:
    """The notebook's own SparkSession (classic or Connect), found as pyspark's ``SparkSession.active()`` finds it;
    None when there is none or it is our embedded one. Never starts a session and never imports pyspark: if pyspark
    is not loaded no session can exist, and a ``--local``-only notebook keeps it unloaded."""
    connect = connect_session()
    if connect is not None:
        return connect
    sql = sys.modules.get("pyspark.sql")
    if sql is None:
        return None
    try:
        session = sql.SparkSession.active()
    except Exception:  # none active and none instantiated
        return None
    return None if is_embedded(session) else session
