"""Sphinx configuration: the jupyter-torchdist documentation site.

Build (from the repository root), as .ci/run does:

    .venv/bin/sphinx-build -W --keep-going -n -b html docs build/docs

Pages are Markdown (MyST); the example notebooks are rendered by MyST-NB without executing them: each page shows
the executed copy the test suite leaves in build/executed/<name> (tests/support/notebooks.py), or else the committed
executed copy in examples/executed/ (the gallery, refreshed by .ci/gallery). They are copied into docs/_examples/
(git-ignored) before the build.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # autodoc imports the package from this checkout

import jupyter_torchdist  # noqa: E402

project = "jupyter-torchdist"
author = "the jupyter-torchdist authors"
copyright = "the jupyter-torchdist authors"
release = version = jupyter_torchdist.__version__

extensions = [
    "myst_nb",  # MyST Markdown pages and .ipynb notebooks (includes myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
]
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
nitpicky = True  # with -n -W a reference that does not resolve fails the build

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-torchdist"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_static_path: list[str] = []
html_last_updated_fmt = None

# ---------------------------------------------------------------- MyST
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links, checked by nitpicky mode

# ---------------------------------------------------------------- MyST-NB: the example notebooks, never executed here
nb_execution_mode = "off"
nb_merge_streams = True
# Our outputs carry a custom MIME type (the run report, the sweep report) with text/html and text/plain fallbacks,
# and the live view is an anywidget (a widget view with a text/plain fallback) whose front end is not on a static
# page. MyST-NB picks by the priorities below: the HTML fallback, else the text. The custom types are also taken out
# of the staged copies (_staged_notebook), as MyST-NB warns about every MIME type it has no renderer for, even one it
# would not pick; so is the widget state, and no widget JavaScript is loaded.
RUN_MIME = "application/vnd.jupyter-torchdist.run+json"
SWEEP_MIME = "application/vnd.jupyter-torchdist.sweep+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
nb_mime_priority_overrides = [
    (builder, mime, None)
    for builder in ("html", "dirhtml", "singlehtml") for mime in (RUN_MIME, SWEEP_MIME, WIDGET_VIEW)
]
nb_ipywidgets_js: dict[str, dict[str, str]] = {}

# ---------------------------------------------------------------- autodoc: the API reference (docs/api.md)
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autosummary_generate = False  # api.md lists the objects itself; the build checks it against __all__
# Type hints name objects of other libraries (torch, pyspark, typing), which have no inventory here, and internal
# types by their module (jupyter_torchdist.core.options.RunOptions), which are not documented: neither is a broken link.
# The public names (jupyter_torchdist.run) and every link a page writes are still checked.
nitpick_ignore_regex = [
    (r"py:.*", r"(?!jupyter_torchdist\b).*"),
    (r"py:.*", r"jupyter_torchdist\.[a-z_]+\..*"),
]

EXAMPLES = ROOT / "examples"
GALLERY = EXAMPLES / "executed"         # committed, with their outputs (.ci/gallery)
EXECUTED = ROOT / "build" / "executed"  # what this checkout's test run left
STAGED = DOCS / "_examples"
DRAWN = {"text/html", "text/plain", "image/png", "image/jpeg", "image/svg+xml", "text/markdown"}


def _staged_notebook(name: str) -> dict:
    """The notebook a page shows: the executed copy the tests left, else the gallery's, else the bare one. Our custom
    MIME types give way to their HTML and text fallbacks; an output with nothing a static page can draw (a widget
    view without a fallback) gets a line saying what was there; the widgets' state is dropped (never drawn)."""
    source = next(p for p in (EXECUTED / name, GALLERY / name, EXAMPLES / name) if p.is_file())
    nb = json.loads(source.read_text())
    metadata = nb.setdefault("metadata", {})
    metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
    metadata.pop("widgets", None)
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is None:
                continue
            for mime in (RUN_MIME, SWEEP_MIME):
                data.pop(mime, None)
            if not DRAWN & set(data):
                data["text/plain"] = "(an interactive view: open the notebook in JupyterLab to see it)"
    return nb


def _stage_examples() -> None:
    """Copy the notebooks to render into docs/_examples/ (git-ignored), afresh each build."""
    shutil.rmtree(STAGED, ignore_errors=True)
    STAGED.mkdir()
    for path in sorted(EXAMPLES.glob("*.ipynb")):
        if path.name.endswith(".out.ipynb"):
            continue
        (STAGED / path.name).write_text(json.dumps(_staged_notebook(path.name), indent=1))


def _check_api_page(app, config) -> None:
    """Every public name (jupyter_torchdist.__all__) is documented in docs/api.md."""
    from sphinx.util import logging

    text = (DOCS / "api.md").read_text()
    missing = [name for name in jupyter_torchdist.__all__
               if not any(f"{kind}:: {name}\n" in text for kind in ("autofunction", "autoclass", "autoexception"))]
    if missing:
        logging.getLogger(__name__).warning("docs/api.md does not document %s (in jupyter_torchdist.__all__)",
                                            ", ".join(missing))


def setup(app):
    app.connect("config-inited", _check_api_page)


_stage_examples()
