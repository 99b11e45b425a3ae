"""Spark's daemon drops the installed pyspark's own zips and jars from its path, and nothing else."""
from __future__ import annotations

from jupyter_torchdist.launchers.session.daemon import installed_copies_off_path


def _tree(tmp_path):
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "pyspark" / "jars").mkdir()
    own = [lib / "pyspark.zip", lib / "py4j-src.zip", site / "pyspark" / "jars" / "spark-core.jar"]
    other = tmp_path / "cluster" / "python" / "lib" / "pyspark.zip"  # a cluster's own SPARK_HOME
    other.parent.mkdir(parents=True)
    for f in [*own, other]:
        f.write_bytes(b"PK")
    return site, [str(f) for f in own], str(other)


def test_the_installed_packages_own_zips_and_jars_leave_the_path(tmp_path):
    site, own, other = _tree(tmp_path)
    path = [*own, other, str(site), ""]
    assert installed_copies_off_path(path, pyspark_loaded=False) == own
    assert path == [other, str(site), ""]


def test_nothing_changes_once_pyspark_is_imported_or_without_an_installed_pyspark(tmp_path):
    site, own, other = _tree(tmp_path)
    path = [*own, str(site)]
    assert installed_copies_off_path(path, pyspark_loaded=True) == [] and path == [*own, str(site)]
    path = [*own, other]  # only the zips: no installed package to take pyspark from
    assert installed_copies_off_path(path, pyspark_loaded=False) == [] and path == [*own, other]
