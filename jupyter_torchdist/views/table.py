"""The one plain-text table: the run report's ranks, a sweep's runs and ``runs()`` are all drawn with it."""
from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["text_table"]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (),
               rule: bool = False, widest: int | None = None, free_last: bool = False) -> list[str]:
    """Aligned columns two spaces apart, one line per row after the header (and a rule under it with ``rule``).
    ``right``: the columns aligned right (numbers); ``widest``: cells cut to that many characters; ``free_last``:
    the last column neither padded nor counted in the widths (a free-text note)."""
    cut = [[cell[:widest] if widest else cell for cell in row] for row in [list(header), *map(list, rows)]]
    sized = len(header) - 1 if free_last else len(header)
    widths = [max(len(row[i]) for row in cut) for i in range(sized)]

    def line(row: Sequence[str]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells + list(row[sized:])).rstrip()

    out = [line(cut[0])]
    if rule:
        out.append(line(["-" * w for w in widths] + ["-" * len(h) for h in header[sized:]]))
    return out + [line(row) for row in cut[1:]]
