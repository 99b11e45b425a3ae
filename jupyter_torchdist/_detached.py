"""``python -m jupyter_torchdist._detached ID``: the process of a detached run (``%%distribute --detach``), its front
door as ``_daemon`` is Spark's. The run's life is ``kernel/detached/runner.py``; here it is also listed in the runs
panel, as a kernel would list its runs (``panel``, a layer above the kernel's)."""
from __future__ import annotations

import sys
from typing import Any

from .kernel.detached.runner import main


def _publish(kernel_id: str, notebook: str | None) -> Any:
    from .core.held_folder import registry_dir
    from .panel.publisher import Publisher

    folder = registry_dir(create=True)
    return None if folder is None else Publisher(folder, kernel_id, notebook).start()


if __name__ == "__main__":
    sys.exit(main(publish=_publish))
