"""``horovod.torch.elastic`` has no counterpart here: importing it fails at once with what to use instead."""
from __future__ import annotations

from ._errors import UNSUPPORTED, HorovodUnsupportedError

raise HorovodUnsupportedError(f"jupyter_torchdist.horovod.elastic (hvd.elastic.run, hvd.elastic.TorchState) is not "
                              f"supported: {UNSUPPORTED['elastic']}.")
