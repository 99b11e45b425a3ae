"""``jupyter-torchdist doctor`` (also ``python -m jupyter_torchdist doctor`` and ``%distribute_doctor``): what an
installation has and lacks, each finding with its fix, before any cell runs.

It checks the kernel's Python (torch and its CUDA and NCCL, pyspark, cloudpickle, this package), Java for Spark,
the JupyterLab / Notebook 7 extension as the running Jupyter finds it and the live view's built front end, the
trackers (``--track``: a default one installed, records not yet sent), and, when
the notebook has a SparkSession of its own, its executors: their Python and package versions against the kernel's,
and whether they reach this machine, where the live channel listens. ``FAIL`` is what a run needs (exit status 1);
``WARN`` what limits it (no Java: runs go to local processes; no GPU: no ``--gpu``) unless ``--gpu`` asks for it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

__all__ = ["Finding", "diagnose", "report", "main"]

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    what: str
    status: Status
    detail: str
    fix: str = ""


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _floor(name: str) -> str | None:
    """The lower bound this package's installed metadata gives ``name`` (None from a bare source checkout)."""
    try:
        requires = metadata.requires("jupyter-torchdist") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        m = re.match(rf"{re.escape(name)}\s*>=\s*([0-9][^,;\s]*)", req, re.I)
        if m:
            return m[1]
    return None


def check_python() -> list[Finding]:
    out = [Finding("Python", "ok" if sys.version_info >= (3, 10) else "fail", sys.version.split()[0],
                   "" if sys.version_info >= (3, 10) else "use Python 3.10 or newer")]
    for name in ("torch", "pyspark", "cloudpickle"):
        version = _version(name)
        if version is None:
            out.append(Finding(name, "fail", "not installed", f"pip install {name} (torch first: see Install)"))
            continue
        floor = _floor(name)
        old = floor is not None and _older(version, floor)
        out.append(Finding(name, "fail" if old else "ok", version + (f" (needs {floor} or newer)" if old else ""),
                           f"pip install '{name}>={floor}'" if old else ""))
    return out


def _older(version: str, floor: str) -> bool:
    from packaging.version import Version

    return Version(version.split("+")[0]) < Version(floor)


def check_gpu(required: bool) -> list[Finding]:
    """torch's CUDA and NCCL, and the GPUs this machine shows (only the build is read: CUDA is not started)."""
    from ..core.gpus import cuda_unfit, visible_gpus

    bad: Status = "fail" if required else "warn"
    why = cuda_unfit()
    if why is not None:
        return [Finding("--gpu", bad, why.split(": ", 1)[1].split(". ")[0],
                        "install a CUDA build of torch (https://pytorch.org/get-started/locally/)"
                        + ("" if required else "; runs without --gpu work as they are"))]
    gpus = visible_gpus()
    if not gpus:
        return [Finding("--gpu", bad, f"no GPU visible (CUDA_VISIBLE_DEVICES="
                        f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})", "check nvidia-smi and the driver")]
    return [Finding("--gpu", "ok", f"{len(gpus)} GPU(s): {', '.join(gpus)}; NCCL available")]


def check_java() -> list[Finding]:
    from ..launchers.session.autostart import java_available

    fix = ("install Java 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; or set JAVA_HOME); "
           "without it every run goes to local processes on this machine")
    if not java_available():
        return [Finding("Java (for Spark)", "warn", "not found (no JAVA_HOME, no java on PATH)", fix)]
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
    try:
        said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Finding("Java (for Spark)", "warn", f"{java} does not run: {exc}", fix)]
    m = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    major = int(m[2] if m and m[1] == "1" else m[1]) if m else 0
    return [Finding("Java (for Spark)", "ok" if major >= 17 else "warn", f"{java}: Java {major or '?'}",
                    "" if major >= 17 else fix)]


def check_front_end() -> list[Finding]:
    """The lab extension where the running Jupyter looks for it, and the live view's front end in the package."""
    from jupyter_core.paths import jupyter_path

    found = [p for p in jupyter_path("labextensions") if (Path(p) / "jupyter-torchdist" / "package.json").is_file()]
    static = Path(__file__).resolve().parent.parent / "static" / "widget.js"
    fix = ("install from a wheel, or from a clone with Node.js (see the Install page); without it the view is "
           "redrawn as HTML after each change, and Stop, Stacks and background reports in place do not work")
    return [Finding("JupyterLab / Notebook 7 extension", "ok" if found else "warn",
                    str(Path(found[0]) / "jupyter-torchdist") if found
                    else "not found in " + os.pathsep.join(jupyter_path("labextensions")),
                    "" if found else fix),
            Finding("live view front end", "ok" if static.is_file() else "warn",
                    str(static) if static.is_file() else "not built", "" if static.is_file() else fix)]


def check_executors(session: Any) -> list[Finding]:
    """One task per executor slot: each executor's Python against the kernel's, and whether it reaches this machine
    at the address the live channel listens on (the session's spark.driver.host)."""
    from ..core.travel import local_versions
    from ..launchers.session.executors import executor_facts

    try:
        host, rows = executor_facts(session, local_versions())
    except Exception as exc:
        return [Finding("executors", "fail", f"a task could not run: {str(exc).splitlines()[0][:300]}",
                        "spark.pyspark.python (or PYSPARK_PYTHON) naming a Python with torch and jupyter-torchdist")]
    out = []
    for row in {r["host"] + r["python"]: r for r in rows}.values():
        where = f"{row['host']} ({row['python']})"
        out.append(Finding(f"executor Python on {where}", "fail" if row["diff"] else "ok",
                           "; ".join(row["diff"]) or "same versions as the kernel",
                           "install the kernel's versions there" if row["diff"] else ""))
        if row["unreachable"]:
            out.append(Finding(f"channel reach from {row['host']}", "fail", f"{host}: {row['unreachable']}",
                               "set spark.driver.host to an address of this machine the executors reach"))
    return out


def check_tracking() -> list[Finding]:
    """Each tracker of the registry: installed, and wanted by default (``JUPYTER_TORCHDIST_TRACK``, ``%config
    DistributeMagics.track``) or not; then each destination with records not yet sent: what its shipper last said
    (down since when, or refused and what to do) and how to send or drop them."""
    from importlib.util import find_spec

    from ..core.errors import OptionsError
    from ..core.track_options import default_trackers
    from ..core.trackers import REGISTRY
    from ..tracking.cli import describe
    from ..tracking.journal import spool_dir
    from ..tracking.outbox import waiting

    try:
        default = default_trackers()
    except OptionsError as exc:
        return [Finding("tracking", "fail", str(exc), f"set it to {', '.join(REGISTRY)}, several with commas, or "
                        "none")]
    out = []
    for name, tracker in REGISTRY.items():
        have = find_spec(tracker.package) is not None
        wanted = name in default
        detail = ("installed" if have else "not installed") + (" (every run tracks it by default)" if wanted else
                                                               f" (only --track {name} needs it)")
        out.append(Finding(f"--track {name}", "fail" if wanted and not have else "ok", detail,
                           tracker.missing.split(": ", 1)[1].split(", then")[0] if wanted and not have else ""))
    for number, entry in enumerate(waiting(spool_dir()), 1):
        status = entry.status or {}
        then = f"`jupyter-torchdist tracking resend {number}` sends them now"
        fix = (f"{status.get('fix')}; then {then}" if status.get("state") == "refused" else
               f"{then} (a kernel that tracks sends them when it answers)")
        out.append(Finding(f"tracking records for {entry.label}", "warn", describe(entry).split(": ", 1)[1],
                           f"{fix}; `jupyter-torchdist tracking drop {number}` gives them up"))
    return out


def diagnose(gpu: bool = False, session: Any = None) -> list[Finding]:
    findings = check_python() + check_gpu(gpu) + check_java() + check_front_end() + check_tracking()
    if session is None:
        findings.append(Finding("executors", "ok", "no SparkSession of the notebook's: the embedded session (or "
                                "local processes) runs on this machine"))
    elif type(session).__module__.startswith("pyspark.sql.connect"):
        findings.append(Finding("executors", "ok", "a Spark Connect session: its first run checks them"))
    else:
        findings += check_executors(session)
    return findings


def report(findings: list[Finding]) -> str:
    mark = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    lines = [f"{mark[f.status]}  {f.what}: {f.detail}" + (f"\n      fix: {f.fix}" if f.fix else "") for f in findings]
    bad = sum(f.status == "fail" for f in findings)
    lines.append("nothing missing" if not bad else f"{bad} thing(s) a run needs are missing")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``doctor [--gpu]``: the report on stdout; exit status 1 when something a run needs is missing."""
    unknown = [a for a in argv if a != "--gpu"]
    if unknown:
        print(f"doctor takes only --gpu (GPU runs are expected here), not {' '.join(unknown)}", file=sys.stderr)
        return 2
    from ..launchers.session.notebook import notebook_session

    findings = diagnose(gpu="--gpu" in argv, session=notebook_session())
    print(report(findings))
    return 1 if any(f.status == "fail" for f in findings) else 0
