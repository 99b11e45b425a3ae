"""A wheel made in the test, installed nowhere: what a user's own ``pip wheel`` gives, for ``--pip``."""
from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

__all__ = ["make_wheel"]


def make_wheel(folder: Path, name: str = "jtd_travelling_pkg", version: str = "0.1") -> Path:
    """A pure-Python wheel made here (installed nowhere): what a user's own ``pip wheel`` gives."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "ANSWER = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name_, text in files.items():
            z.writestr(name_, text)
    return path
