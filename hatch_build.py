"""The build hook: the JupyterLab extension and the live view's front end, built from ``labextension/`` only when the
committed build does not match its sources, so that a clone installs without Node.js.

The built files are committed (``jupyter_torchdist/labextension/``, ``jupyter_torchdist/static/``) with a stamp,
``jupyter_torchdist/static/sources.sha256``: the digest of every source file the build reads. ``jlpm build:prod``
writes it (``labextension/build-widget.mjs``, in production mode); this hook computes the same digest from the
sources at hand. Equal: the committed build is these sources' build, nothing runs, no Node.js is needed. Different
(a changed ``.ts`` file, a checkout without the build): the hook runs ``jlpm install`` and ``jlpm build:prod``, which
needs Node.js 20, and says so plainly when it is missing. ``tests/unit/test_labextension_build.py`` keeps the
committed stamp equal to the committed sources, so a clone never needs Node.js.

``SKIP_JUPYTER_BUILDER=1`` skips the hook altogether (as hatch-jupyter-builder's switch of that name did).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # imported by the tests for sources_digest() alone, without hatchling
    BuildHookInterface = object  # type: ignore[assignment,misc]

SOURCE = "labextension"
NOT_SOURCES = {"node_modules", "lib", ".yarn", "README.md", "install.json"}  # outputs, caches, docs
STAMP = "jupyter_torchdist/static/sources.sha256"
BUILT = ("jupyter_torchdist/labextension/package.json", "jupyter_torchdist/labextension/static/style.js",
         "jupyter_torchdist/static/widget.js", "jupyter_torchdist/static/widget.css")


def source_files(root: Path) -> list[Path]:
    """Every file the front end's build reads, in a fixed order (relative paths, '/'-separated, sorted)."""
    base = root / SOURCE
    out = []
    for path in base.rglob("*"):
        rel = path.relative_to(base)
        if path.is_file() and not (set(rel.parts) & NOT_SOURCES):
            out.append(path)
    return sorted(out, key=lambda p: p.relative_to(base).as_posix())


def sources_digest(root: Path) -> str:
    """sha256 over each source's path and the sha256 of its bytes (``build-widget.mjs`` computes the same)."""
    outer = hashlib.sha256()
    for path in source_files(root):
        inner = hashlib.sha256(path.read_bytes()).hexdigest()
        outer.update(f"{path.relative_to(root / SOURCE).as_posix()}\0{inner}\n".encode())
    return outer.hexdigest()


def committed_build_matches(root: Path) -> bool:
    stamp = root / STAMP
    return all((root / p).is_file() for p in BUILT) and stamp.is_file() \
        and stamp.read_text().strip() == sources_digest(root)


def build(root: Path) -> None:
    """``jlpm install`` and ``jlpm build:prod`` in labextension/ (Node.js 20 on PATH)."""
    if shutil.which("node") is None:
        raise RuntimeError(
            "jupyter-torchdist: the built JupyterLab extension does not match labextension/'s sources (a front-end "
            "file changed, or this checkout has no build), and rebuilding it needs Node.js 20 on PATH. Install "
            "Node.js 20, or install a checkout whose committed build matches (any commit of the main branch), or set "
            "SKIP_JUPYTER_BUILDER=1 to install the Python package without the extension.")
    jlpm = [shutil.which("jlpm")] if shutil.which("jlpm") else [sys.executable, "-m", "jupyter_builder.jlpm"]
    for args in (["install"], ["build:prod"]):
        subprocess.run([*jlpm, *args], cwd=root / SOURCE, check=True)  # type: ignore[list-item]


class LabExtensionHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    """hatchling's custom build hook (``[tool.hatch.build.hooks.custom]`` in pyproject.toml)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name not in ("wheel", "sdist") or os.environ.get("SKIP_JUPYTER_BUILDER"):
            return
        root = Path(self.root)
        if committed_build_matches(root):
            self.app.display_info("jupyter-torchdist: the committed front-end build matches its sources: not rebuilt")
            return
        build(root)
        if not committed_build_matches(root):
            raise RuntimeError(f"jupyter-torchdist: jlpm build:prod ran but {STAMP} does not match the sources")
