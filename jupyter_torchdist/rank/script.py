"""A torchrun-style script, run on a rank: its source travels, not just its path.

The script runs as ``__main__`` with ``sys.argv`` set, as ``python train.py ARGS`` would run it.
Its sibling modules (``from model import Net`` next to ``train.py``) are imported from the
script's folder when the rank's host has it (the kernel's machine, a shared filesystem), and
otherwise from copies shipped with the script, so a cluster executor needs no copy of the folder.
"""
from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import os
import sys
import tempfile
import types
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from ..core.travel import register_source

__all__ = ["Script", "WithConfigFile"]


class _Shipped(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the shipped sibling modules from memory; keys ending in "/" are packages."""

    def __init__(self, folder: str, modules: dict[str, str]) -> None:
        self.folder = folder
        self.sources = {k.rstrip("/"): v for k, v in modules.items()}
        self.packages = {k[:-1] for k in modules if k.endswith("/")}

    def _filename(self, name: str) -> str:
        parts = name.split(".")
        if name in self.packages:
            return os.path.join(self.folder, *parts, "__init__.py")
        return os.path.join(self.folder, *parts[:-1], parts[-1] + ".py")

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.sources:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=self._filename(fullname),
                                              is_package=fullname in self.packages)
        spec.has_location = True
        return spec

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__spec__.name  # type: ignore[union-attr]
        filename = self._filename(name)
        register_source(filename, self.sources[name])
        exec(compile(self.sources[name], filename, "exec"), module.__dict__)


@dataclass(frozen=True)
class Script:
    """``python path args...`` on a rank. Picklable by reference (this module exists on every rank)."""
    path: str
    source: str
    args: tuple[str, ...] = ()
    siblings: dict[str, str] = field(default_factory=dict)

    def __call__(self) -> None:
        folder = os.path.dirname(self.path)
        code = compile(self.source, self.path, "exec")
        register_source(self.path, self.source)  # tracebacks show the lines even where the file is not
        main = types.ModuleType("__main__")
        main.__dict__.update(__file__=self.path, __builtins__=__builtins__, __spec__=None, __loader__=None)
        saved = sys.argv[:], sys.path[:], list(sys.meta_path), sys.modules.get("__main__")
        sys.argv = [self.path, *self.args]
        if os.path.isdir(folder):
            sys.path.insert(0, folder)
        elif self.siblings:
            sys.meta_path.insert(0, _Shipped(folder, self.siblings))
        sys.modules["__main__"] = main  # pickle and multiprocessing find the script's own classes
        try:
            exec(code, main.__dict__)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                raise
            print(exc.code, file=sys.stderr)  # sys.exit("message"): Python prints it and exits 1
            raise SystemExit(1) from None
        finally:
            sys.argv, sys.path[:], sys.meta_path[:] = saved[0], saved[1], saved[2]
            if saved[3] is not None:
                sys.modules["__main__"] = saved[3]


# -- a configuration file written on the rank's host -------------------------------------------------------------------
# A script run with a configuration file written on the rank's own host (DeepSpeed's ``--deepspeed_config``).
#
# A configuration the notebook gives as a dict travels with the run as text; each rank writes it to a file of its
# own before the script starts, so the path the script reads exists wherever the rank runs (a cluster's executor
# has no copy of a temporary file on the kernel's machine, which is what a path written there would name).
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
