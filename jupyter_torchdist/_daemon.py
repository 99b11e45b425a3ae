"""Spark's Python daemon with torch already imported, so every forked worker starts warm.

Named in Spark conf as ``spark.python.daemon.module`` (the embedded session sets it; on a cluster the
user may): this module path is public and stays. Imports happen once here, before the daemon forks
workers; nothing here starts threads or touches CUDA. pandas and pyarrow (when installed) come too:
data workers (``batches()``) use them, and importing pandas costs about half a second per fresh worker.
"""
from jupyter_torchdist.rank.agent import preload

preload()
for _optional in ("pyarrow", "pandas"):
    try:
        __import__(_optional)
    except Exception:
        pass

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
