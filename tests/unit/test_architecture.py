"""The package's layers stay layered: no import circle, no import from a lower layer to a higher one, Spark
for launching only under ``launchers/``, and no module outside it asking whether a run is local.

Layers, lowest first (a module imports its own layer and those below): ``core/`` (the contract and other
foundations), the channel, the views, the rank side, the launchers, the data plane, tracking, the kernel, the Horovod
API, the runs panel (the registry the kernels write, the server extension and the command line that read it), the
package's front doors. Imports inside functions and under ``TYPE_CHECKING`` count like any other.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "jupyter_torchdist"
ORDER = ["core", "channel", "views", "rank", "launchers", "data", "tracking", "kernel", "horovod", "panel", "top"]
_SUBPACKAGES = set(ORDER) - {"top"}
ROOT_MODULES = {"__init__", "__main__", "_daemon", "_detached"}  # the front doors, and what runs by name (Spark
# imports _daemon; a detached run is the process python -m jupyter_torchdist._detached)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if "labextension" in parts or "static" in parts:
            continue
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _targets(mod: str, node: ast.Import | ast.ImportFrom, is_pkg: bool, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    prefix = ".".join(base[:len(base) - node.level + 1]) if node.level else ""
    full = ".".join(x for x in (prefix, node.module or "") if x)
    return [f"{full}.{a.name}" if f"{full}.{a.name}" in mods else full for a in node.names]


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Package imports between our modules, and every import (ours or not) each module makes."""
    mods, edges, imports = _modules(), {}, {}
    for mod, path in mods.items():
        found = [t for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))
                 for t in _targets(mod, node, path.name == "__init__.py", mods)]
        imports[mod] = set(found)
        edges[mod] = {t for t in found if t in mods and t != mod}
    return edges, imports


def _layer(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "top"
    if parts[1] == "_daemon":
        return "launchers"  # Spark's Python daemon module: a launcher's part, at the path Spark's conf names
    if parts[1] == "_detached":
        return "top"  # a detached run's process: its front door, which lists the run in the panel
    assert parts[1] in _SUBPACKAGES, f"{mod}: every module but the front doors lives in a layer's folder"
    return parts[1]


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_circle():
    assert _circles(_graph()[0]) == []


def test_no_layer_imports_a_higher_one():
    edges, _ = _graph()
    up = [f"{a} -> {b}" for a, ts in edges.items() for b in ts if ORDER.index(_layer(b)) > ORDER.index(_layer(a))]
    assert up == []


def test_the_checks_above_can_fail():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _layer("jupyter_torchdist.rank.main") == "rank" and _layer("jupyter_torchdist.core.contract") == "core"
    launch, launchers = _layer("jupyter_torchdist.kernel.runs.driver"), _layer("jupyter_torchdist.launchers")
    assert ORDER.index(launch) > ORDER.index(launchers)


def test_pyspark_is_imported_only_by_launchers_and_the_data_plane():
    """Launching is the launchers' job; data/ uses DataFrame operations on the user's DataFrames."""
    _, imports = _graph()
    users = {m for m, names in imports.items() if any(n == "pyspark" or n.startswith("pyspark.") for n in names)}
    assert users, "the scan found no pyspark import at all: it is broken"
    assert {m for m in users if _layer(m) not in ("launchers", "data")} == set()


def test_only_launchers_ask_whether_a_run_is_local():
    asking = re.compile(r"\boptions\.local\b|\.local\s*(?:==|!=|\bif\b)|get_launcher\(")
    found = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
             if p.parent.name != "launchers" and p.name != "options.py" and asking.search(p.read_text())]
    assert found == []


def test_the_package_root_holds_only_the_front_doors():
    """Everything else is in the folder of its layer (issue 43: a house a newcomer finds their way in)."""
    assert {p.stem for p in PKG.glob("*.py")} == ROOT_MODULES


_SPARK_OBJECTS = {"sparkContext", "_jsc", "_jvm", "_jsparkSession", "_gateway", "_active_spark_context", "uiWebUrl"}


def test_only_launchers_and_the_data_plane_touch_sparks_objects():
    """Every Spark call lives in ``launchers/`` (or ``data/``, on the user's DataFrames): the kernel, the doctor, the
    TorchDistributor classes and Horovod's ``spark.run`` ask a launcher (issue 50)."""
    found = []
    for mod, path in _modules().items():
        if _layer(mod) in ("launchers", "data"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in _SPARK_OBJECTS:
                found.append(f"{mod}:{node.lineno}: .{node.attr}")
    assert found == []


def _rooms(folder: Path) -> dict[Path, list[str]]:
    """A folder's sub-packages ("rooms") and the modules each holds (``__init__`` not counted)."""
    return {room: sorted(p.stem for p in room.glob("*.py") if p.stem != "__init__")
            for room in sorted(folder.iterdir()) if (room / "__init__.py").is_file()}


def test_the_kernel_and_the_launchers_are_rooms_by_feature_each_saying_what_lives_there():
    """``kernel/`` keeps its features in rooms, each with a docstring that says what lives there (issue 50; how many
    modules a room holds is for review, issue 57); ``launchers/`` keeps its backends at the top."""
    for folder in (PKG / "kernel", PKG / "launchers"):
        rooms = _rooms(folder)
        assert rooms, f"{folder.name}/ has no rooms"
        for room, modules in rooms.items():
            assert modules, f"{room.relative_to(PKG)} is an empty room"
            doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text()))
            assert doc and len(doc) > 40, f"{room.relative_to(PKG)}/__init__.py says nothing of what lives there"


def test_no_test_double_ships_in_the_package():
    """Simulated ranks and other stand-ins live in tests/support/, registered by the tests that use them."""
    doubles = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if re.search(r"simulat|fake|mock|stand_?in", p.stem) or "JUPYTER_TORCHDIST_SIMULATE" in p.read_text()]
    assert doubles == []


def test_the_architecture_pages_drawing_matches_the_tree():
    """docs/layers.svg draws every layer in the order the imports keep, and names every room of each folder."""
    svg = (PKG.parent / "docs" / "layers.svg").read_text()
    drawn = re.findall(r'font-weight="bold"[^>]*>([a-z_]+)/</text>', svg)
    assert drawn == [layer for layer in reversed(ORDER) if layer != "top"]
    for layer in drawn:
        rooms = {room.name for room in _rooms(PKG / layer)}
        line = re.search(rf'>{layer}/</text>\n(?:<text[^\n]*\n)?(<text[^>]*font-style="italic"[^>]*>rooms: ([^<]*)<)?',
                         svg)
        named = set(re.findall(r"([a-z_]+)/", line.group(2))) if line and line.group(2) else set()
        assert named == rooms, f"{layer}/: drawn rooms {sorted(named)}, rooms in the tree {sorted(rooms)}"
