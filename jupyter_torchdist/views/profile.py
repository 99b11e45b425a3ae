"""A --profile run's table, for the text and HTML reports (the extension draws the same: ``profile.ts``): a row per
rank with its window, its time per step and the shares of input, compute, communication and other."""
from __future__ import annotations

import html
from typing import Final

from .schema import ProfileSnapshot

__all__ = ["profile_lines", "profile_html"]

_KINDS: Final = (("input", "input"), ("compute", "compute"), ("comm", "comm"), ("other", "other"))


def _window(first: int | None, last: int | None) -> str:
    return "-" if first is None or last is None else f"{first}-{last}"


def _cells(row: dict[str, object]) -> list[str]:
    step_s = row.get("step_s")
    cells = [str(row.get("rank")), _window(row.get("first"), row.get("last")),  # type: ignore[arg-type]
             "-" if not isinstance(step_s, (int, float)) else f"{step_s * 1000:.1f} ms"]
    cells += [f"{float(row.get(key) or 0.0):.0%}" for key, _ in _KINDS]  # type: ignore[arg-type]
    return cells + [str(row.get("note") or row.get("trace") or "")]


_HEAD: Final = ["rank", "steps", "step", *[title for _, title in _KINDS], "trace"]


def profile_lines(profile: ProfileSnapshot | None) -> list[str]:
    if not profile or not profile["ranks"]:
        return []
    rows = [_HEAD] + [_cells(dict(r)) for r in profile["ranks"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD) - 1)]
    lines = ["", f"profile: {profile['verdict'] or 'no window closed'}"]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    return lines


def profile_html(profile: ProfileSnapshot | None, th: str, td: str, tr: str, title: str) -> str:
    if not profile or not profile["ranks"]:
        return ""
    e = html.escape
    head = "".join(f'<th style="{th}">{e(h)}</th>' for h in _HEAD)
    body = "".join(f'<tr style="{tr}">' + "".join(f'<td style="{td}">{e(c)}</td>' for c in _cells(dict(r)))
                   + "</tr>" for r in profile["ranks"])
    return (f'<div style="margin-top:10px"><div style="{title}">Profile: {e(profile["verdict"] or "")}</div>'
            f'<table style="border-collapse:collapse;margin-top:4px"><tr>{head}</tr>{body}</table></div>')
