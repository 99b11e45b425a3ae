"""Spark's Python daemon with torch already imported, so every forked worker starts warm.

Set as ``spark.python.daemon.module`` on the embedded session. Imports happen once here,
before the daemon forks workers; nothing here starts threads or touches CUDA.
"""
import torch  # noqa: F401
import torch.distributed  # noqa: F401
import torch.nn.parallel  # noqa: F401

try:
    import torch._dynamo  # noqa: F401  (DistributedDataParallel imports it lazily: ~2 s otherwise)
except Exception:  # pragma: no cover - optional speed-up only
    pass
try:
    import tqdm.std  # noqa: F401
    import tqdm.auto  # noqa: F401
except Exception:  # pragma: no cover
    pass
import cloudpickle  # noqa: F401

import jupyter_torchdist.agent  # noqa: F401

jupyter_torchdist.agent.preload()

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
