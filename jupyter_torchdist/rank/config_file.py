"""A script run with a configuration file written on the rank's own host (DeepSpeed's ``--deepspeed_config``).

A configuration the notebook gives as a dict travels with the run as text; each rank writes it to a file of its
own before the script starts, so the path the script reads exists wherever the rank runs (a cluster's executor
has no copy of a temporary file on the kernel's machine, which is what a path written there would name).
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass

from .script import Script

__all__ = ["WithConfigFile"]


@dataclass(frozen=True)
class WithConfigFile:
    """``python path args... FLAG <file>``, ``<file>`` holding ``text``; removed when the script ends."""
    script: Script
    flag: str
    text: str

    def __call__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="deepspeed-config-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(self.text)
        try:
            dataclasses.replace(self.script, args=(*self.script.args, self.flag, path))()
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
