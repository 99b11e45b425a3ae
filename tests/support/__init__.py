"""What the tests share: rank functions (pickled by value, see ``tests/conftest.py``), process accounting, a real
kernel, the standalone cluster, notebooks, the channel's test peers, the browser harness."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
EXAMPLES = ROOT / "examples"
