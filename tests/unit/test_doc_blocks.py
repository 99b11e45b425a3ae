"""The doc test's reading of the pages (tests/support/doc_pages.py): which blocks are cells, which are skipped and why,
and that every skipped block tells the reader why in a note above it."""
from __future__ import annotations

from pathlib import Path

from ..support.doc_pages import blocks, marker_problems, pages

PAGE = """# A page

```ipython
%load_ext jupyter_torchdist
```

```bash
pip install it
```

- a list item with a block:

  ```python
  x = 1
  ```

<!-- doc-test: skip (needs a GPU) -->
:::{note}
Needs a GPU: not run by the docs' test.
:::

```ipython
%%distribute -n 8 --gpu
```

<!-- doc-test: raises RunFailed -->
```python
boom()
```

<!-- doc-test: skip (needs a GPU) -->
```python
no_note_above()
```

<!-- doc-test: skip (a cluster) -->
```{note}
A cluster.
```
```python
cluster()
```

<!-- doc-test: skip (needs a GPU) -->

Some prose between.

```python
orphan()
```

<!-- doc-test: skip (needs a cluster at spark://head:7077) -->
> [!NOTE]
> GitHub's note, for the README.

```python
readme_cluster()
```
"""


def test_cells_are_the_python_blocks_in_order_dedented_with_their_markers(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(PAGE)
    found = blocks(page)
    assert [b.source for b in found] == ["%load_ext jupyter_torchdist", "x = 1", "%%distribute -n 8 --gpu", "boom()",
                                         "no_note_above()", "cluster()", "orphan()", "readme_cluster()"]
    assert [b.skip for b in found] == [None, None, "needs a GPU", None, "needs a GPU", "a cluster", None,
                                       "needs a cluster at spark://head:7077"]
    assert [b.raises for b in found] == [None, None, None, "RunFailed", None, None, None, None]
    assert found[2].line == 22  # its opening fence


def test_a_skip_without_a_note_a_reason_that_is_not_a_need_and_an_orphan_marker_are_refused(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(PAGE)
    problems = marker_problems(page)
    assert len(problems) == 3, problems
    assert "p.md:31" in problems[0] and "note above it" in problems[0]
    assert "p.md:36" in problems[1] and "starts with 'needs '" in problems[1]
    assert "p.md:44" in problems[2] and "not right above a python block" in problems[2]


def test_every_page_marks_its_skipped_blocks_for_the_reader() -> None:
    assert [p for page in pages() for p in marker_problems(page)] == []
