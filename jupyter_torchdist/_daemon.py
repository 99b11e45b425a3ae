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

Spark's own daemon imports its worker module (``pyspark.worker``) after each fork, so that nothing it imports can
start a thread before a fork; with pandas and pyarrow already here that care buys nothing, and each fresh worker
paid about a third of a second of CPU for it: the module and what it imports compiled from source out of
``pyspark.zip`` (a zip holds no bytecode cache), and then ``importlib.invalidate_caches`` re-reading the directory of
every zip and jar on the worker's path (Spark's core jar alone lists 6,000 files). So the worker module is imported
here, once; and where those zips and jars are the installed pyspark's own copies (the pip package, as the embedded
session and a pip-installed cluster use), they leave the daemon's path and pyspark comes from the installed package
with its bytecode cache. 256 barrier tasks then start in a fraction of the time (``benchmarks/bench_scale.py``).

``SIGUSR1`` asks the daemon (not its workers) to give its file-backed pages back (``_pages``): an idle notebook's
release sends it once the idle workers are gone (``launchers.idle_release``).
"""
import gc
import os
import signal
import sys

from jupyter_torchdist.launchers.session.daemon import installed_copies_off_path  # imports no pyspark

installed_copies_off_path(sys.path, "pyspark" in sys.modules)

from jupyter_torchdist.launchers.session.daemon import give_back_file_pages  # noqa: E402
from jupyter_torchdist.rank.agent import preload  # noqa: E402

preload()
for _optional in ("pyarrow", "pandas", sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark")
                  else "pyspark.worker"):
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
