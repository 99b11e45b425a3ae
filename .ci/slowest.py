"""Print the slowest tests of a JUnit XML report (pytest's --junitxml): `python .ci/slowest.py build/junit.xml 25`.

pytest's own --durations lists setup, call and teardown apart; a test's whole cost (a kernel started by its fixture,
say) is their sum, which is what the report's `time` attribute holds, and what CI's minutes are spent on.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def slowest(path: str, count: int) -> list[tuple[float, str]]:
    cases = ET.parse(path).getroot().iter("testcase")
    timed = [(float(c.get("time") or 0), f"{c.get('classname')}::{c.get('name')}") for c in cases]
    return sorted(timed, reverse=True)[:count]


def main() -> None:
    path, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = slowest(path, count)
    total = sum(float(c.get("time") or 0) for c in ET.parse(path).getroot().iter("testcase"))
    print(f"the {len(rows)} slowest tests (of {total:.0f} s in all):")
    for seconds, name in rows:
        print(f"{seconds:8.1f} s  {name}")


if __name__ == "__main__":
    main()
