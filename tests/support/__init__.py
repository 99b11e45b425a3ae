"""What the tests share: rank functions (pickled by value, see ``tests/conftest.py``), process accounting, a real
kernel, the standalone cluster, notebooks, the channel's test peers, the browser harness."""
from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository
EXAMPLES = ROOT / "examples"


def needs(*packages: str) -> pytest.MarkDecorator:
    """Skip a test module when a package it tests is not installed, without importing it while collecting (DeepSpeed
    and MLflow take seconds to import: every quick run would pay for them). CI installs them all."""
    missing = [name for name in packages if find_spec(name) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (pip install -e '.[test]')")
