"""Every run of the user's kernels in one place: the registry, the runs panel's server side and the command line.

Each kernel with the extension loaded writes its runs' summaries to one file of its own under Jupyter's runtime
directory (``registry.py``: the format; ``folder.py``: the owner-only folder and its atomic writes), from a thread of
its own (``publisher.py``, fed by ``entries.py``), and takes requests (stop a run, write its report) from files
beside it (``asks.py``). The Jupyter server extension (``server.py``) serves the list, the stop and the report to the
JupyterLab panel (``labextension/src/runs_*.ts``); ``jupyter-torchdist runs`` and ``jupyter-torchdist stop`` read and
write the same files (``cli.py``), with or without a server. Nothing here reads another user's runtime directory.

The server and the command line import only ``folder``, ``registry``, ``asks``, ``listing`` (and the views, to draw a
report as HTML): never the kernel side.
"""
from __future__ import annotations

__all__ = ["_jupyter_server_extension_points"]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Jupyter server finds the extension here (``jupyter-config/jupyter_server_config.d/`` enables it)."""
    return [{"module": "jupyter_torchdist.panel.server"}]
