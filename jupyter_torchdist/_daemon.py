"""Spark's Python daemon with torch already imported, so every forked worker starts warm.

Named in Spark conf as ``spark.python.daemon.module`` (the embedded session sets it; on a cluster the
user may): this module path is public and stays. Imports happen once here, before the daemon forks
workers; nothing here starts threads or touches CUDA. pandas and pyarrow (when installed) come too:
data workers (``batches()``) use them, and importing pandas costs about half a second per fresh worker.

What was imported is then frozen out of the garbage collector (``gc.freeze``): Spark's daemon runs a full
``gc.collect()`` in a reused worker after every task, and with torch, pandas and pyarrow loaded that walks
about 320,000 objects (0.15 s in a fresh worker); a profile of a data epoch on a 2-core executor put about
3.5 s of its workers' CPU there, more than a tenth of it. Frozen objects are never freed, which is right for
modules that live as long as the worker, and forked workers then also leave their pages shared with the
daemon instead of writing GC bookkeeping into them.

``SIGUSR1`` asks the daemon (not its workers) to give its file-backed pages back (``_pages``): an idle notebook's
release sends it once the idle workers are gone (``launchers.idle_release``).
"""
import gc
import os
import signal

from jupyter_torchdist._pages import give_back_file_pages
from jupyter_torchdist.rank.agent import preload

preload()
for _optional in ("pyarrow", "pandas"):
    try:
        __import__(_optional)
    except Exception:
        pass
gc.collect()
gc.freeze()
_DAEMON_PID = os.getpid()


def _give_back(signum: int, frame: object) -> None:
    if os.getpid() == _DAEMON_PID:
        give_back_file_pages()
    else:  # a forked worker or rank inherited this handler: the signal means there what it always meant
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGUSR1)


signal.signal(signal.SIGUSR1, _give_back)

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
