"""The notebook's own code on a cluster whose workers cannot see the notebook's folder (``Cluster.notebooks``), in a
real kernel: a module and a package beside the notebook, a file read by its relative path, an edit seen by the next
run, a wheel neither the kernel nor the executors have (``--pip``), and a module that exists nowhere."""
from __future__ import annotations

import textwrap

import pytest

from ..support.cluster import Cluster, kernel_on
from ..support.wheels import make_wheel

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

CELL = """%%distribute -n 2
import os, mymodel, helpers
import torch, torch.distributed as dist
t = torch.tensor([float(mymodel.VALUE)])
dist.all_reduce(t)
(t.item(), helpers.NAME, open("data.txt").read().strip(), os.path.exists({original!r}))
"""


@pytest.fixture(scope="module")
def notebook(cluster: Cluster):
    """A kernel whose notebook folder holds ``mymodel.py``, a package ``helpers/`` and ``data.txt``."""
    folder = cluster.notebooks / "tutorial"
    (folder / "helpers").mkdir(parents=True)
    (folder / "mymodel.py").write_text("VALUE = 1\n")
    (folder / "helpers" / "__init__.py").write_text("from .names import NAME\n")
    (folder / "helpers" / "names.py").write_text("NAME = 'helpers'\n")
    (folder / "data.txt").write_text("beside the notebook\n")
    kernel = kernel_on(cluster, name="tutorial")
    try:
        yield kernel, folder
    finally:
        kernel.shutdown()


def test_the_notebooks_modules_and_files_reach_ranks_that_cannot_see_its_folder(notebook, cluster):
    kernel, folder = notebook
    cell = CELL.format(original=str(folder / "mymodel.py"))  # the last value: whether a rank sees the kernel's file
    text = kernel.ok(cell, timeout=240)
    assert "(2.0, 'helpers', 'beside the notebook', False)" in text, text + cluster.logs()

    (folder / "mymodel.py").write_text("VALUE = 5\n")  # same size, same second: the next run must see it
    text = kernel.ok(cell, timeout=240)
    assert "(10.0, 'helpers', 'beside the notebook', False)" in text, text


def test_a_wheel_on_the_kernels_machine_travels_with_pip(notebook, cluster):
    kernel, folder = notebook
    wheel = make_wheel(folder.parent)
    text = kernel.ok(f"%%distribute -n 2 --pip {wheel}\nimport jtd_travelling_pkg\njtd_travelling_pkg.ANSWER",
                     timeout=300)
    assert "42" in text, text + cluster.logs()
    missing = kernel.execute("import jtd_travelling_pkg")  # never installed in the kernel's own environment
    assert missing["status"] == "error"


def test_a_module_that_exists_nowhere_is_named_and_the_kernel_stays_usable(notebook):
    kernel, _ = notebook
    r = kernel.execute("%%distribute -n 2\nimport jtd_no_such_module\n1", timeout=240)
    text = kernel.text(r)
    assert r["status"] == "error" and "No module named 'jtd_no_such_module'" in text, text
    r = kernel.execute(textwrap.dedent("""\
        %%distribute -n 2
        import importlib
        importlib.import_module("json").dumps([1])"""), timeout=240)
    assert r["status"] == "ok" and "[1]" in kernel.text(r), kernel.text(r)


def test_a_package_the_executors_lack_is_named_before_the_group_forms(notebook, cluster):
    kernel, folder = notebook
    site = folder.parent / "only-here" / "site-packages"  # installed for the kernel alone
    (site / "jtd_only_here").mkdir(parents=True)
    (site / "jtd_only_here" / "__init__.py").write_text("")
    (site / "jtd_only_here-0.3.dist-info").mkdir()
    (site / "jtd_only_here-0.3.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: jtd_only_here\n"
                                                                    "Version: 0.3\n")
    kernel.ok(f"import site; site.addsitedir({str(site)!r}); import jtd_only_here")
    r = kernel.execute("%%distribute -n 2\nimport jtd_only_here\n1", timeout=240)
    text = kernel.text(r)
    assert r["status"] == "error" and "`jtd_only_here` cannot be imported on" in text, text
    assert "--pip jtd_only_here==0.3" in text and r["seconds"] < 60


def test_a_module_imported_by_a_computed_name_is_explained(notebook, cluster):
    kernel, folder = notebook
    other = folder.parent / "elsewhere"
    other.mkdir()
    (other / "jtd_by_name.py").write_text("VALUE = 1\n")
    kernel.ok(f"import sys; sys.path.append({str(other)!r}); import jtd_by_name")
    r = kernel.execute("%%distribute -n 2\nimport importlib\nimportlib.import_module('jtd_' + 'by_name').VALUE",
                       timeout=240)
    text = kernel.text(r)
    assert r["status"] == "error" and "No module named 'jtd_by_name'" in text, text
    assert f"`jtd_by_name` is in the kernel ({other / 'jtd_by_name.py'})" in text and "it was not sent" in text
