"""Patch a module right after it is first imported in this process (a rank's bridges to tqdm and trainers).

A rank must not import a framework just to patch it (Lightning or transformers cost seconds): the patch waits on
``sys.meta_path`` until the user's code imports the module, then runs once on the fresh module.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any, Callable

__all__ = ["patch_on_import"]

Patch = Callable[[ModuleType], None]


def patch_on_import(patches: dict[str, Patch]) -> None:
    """Run ``patches[name](module)`` now for modules already imported, else right after ``name`` is imported."""
    waiting: dict[str, Patch] = {}
    for name, patch in patches.items():
        module = sys.modules.get(name)
        if module is None:
            waiting[name] = patch
            continue
        try:
            patch(module)
        except Exception:
            pass
    if waiting:
        sys.meta_path.insert(0, _PatchOnImport(waiting))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of each awaited module so its patch runs after it executes."""

    def __init__(self, patches: dict[str, Patch]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.pop(name, None)
        if patch is None:
            return None
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Patched(spec.loader, patch)
        return spec


class _Patched(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Patch) -> None:
        self.inner, self.patch = inner, patch

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        try:
            self.patch(module)
        except Exception:
            pass  # a bridge must never break the user's import
