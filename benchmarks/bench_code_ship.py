"""Issue 56: what the notebook's code costs a rerun, side by side in one run.

    python benchmarks/bench_code_ship.py [--rounds 15] [--mb 5]

A notebook folder of about 5 MB (50 data files of 100 KB, ``mymodel.py``, a package ``helpers/``), measured in
this process (the kernel's side) and in a fresh Python per host (a rank's side), alternating:

* the kernel: naming what travels (``ship_code``: a walk of the folder, the imports traced) for the folder unchanged,
  after one module was edited, and for an empty folder (the floor);
* a rank on the kernel's machine (the folder in place): ``set_up`` unchanged;
* a rank on a host that cannot see the folder: ``set_up`` the first time (fetch and unpack), and on a rerun with the
  folder unchanged (its bytes kept on the host: only the run's own copy is made);
* whole ``--local`` runs of a 2-rank cell that imports ``mymodel``: in the 5 MB folder and in an empty one.

Target: an unchanged 5 MB folder adds under 10 ms to a rerun (the kernel's naming plus a rank's setup in place).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common

RANK_SIDE = textwrap.dedent("""
    import os, pickle, sys, time
    import torch  # a rank forks from a warm worker that has imported it
    from jupyter_torchdist.rank import code_setup
    code, blobs, rounds = pickle.load(open(sys.argv[1], "rb"))
    times = []
    for i in range(rounds):
        t0 = time.perf_counter()
        setup = code_setup.set_up(code, blobs.__getitem__, f"bench-{os.getpid()}-{i}")
        times.append(time.perf_counter() - t0)
        setup.close()
    print(repr(times))
""")


def _folder(root: str, mb: float) -> str:
    folder = os.path.join(root, "notebook")
    os.makedirs(os.path.join(folder, "helpers"))
    with open(os.path.join(folder, "mymodel.py"), "w") as f:
        f.write("import helpers\nVALUE = 1\n" + "# a line of a model\n" * 200)
    with open(os.path.join(folder, "helpers", "__init__.py"), "w") as f:
        f.write("NAME = 'helpers'\n")
    files = max(1, int(mb * 10))
    for i in range(files):
        with open(os.path.join(folder, f"data-{i:03d}.bin"), "wb") as f:
            f.write(os.urandom(100 * 1024))
    return folder


def _rank_side(code, blobs, rounds: int, tmp: str) -> list[float]:
    path = os.path.join(tmp, "ship.pkl")
    with open(path, "wb") as f:
        pickle.dump((code, blobs, rounds), f)
    out = subprocess.run([sys.executable, "-c", RANK_SIDE, path], capture_output=True, text=True, check=True,
                         env={**os.environ, "TMPDIR": os.path.join(tmp, "host")}, cwd="/")
    return eval(out.stdout)


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--mb", type=float, default=5.0)
    args = ap.parse_args()
    started = time.perf_counter()
    info = common.begin("bench_code_ship: the notebook's code on every rank")
    import jupyter_torchdist as jt
    from jupyter_torchdist.core.options import RunOptions
    from jupyter_torchdist.kernel.code_ship import blob, ship_code

    tmp = tempfile.mkdtemp(prefix="jtd-bench-code-")
    os.makedirs(os.path.join(tmp, "host"))
    folder, empty = _folder(tmp, args.mb), os.path.join(tmp, "empty")
    os.mkdir(empty)
    options, modules = RunOptions(), {"mymodel", "torch"}
    sys.path.insert(0, "")
    kernel: dict[str, list[float]] = {"unchanged": [], "edited": [], "empty": []}
    runs: dict[str, list[float]] = {"5 MB folder": [], "empty folder": []}

    def cell() -> int:
        import mymodel
        return mymodel.VALUE

    try:
        os.chdir(folder)
        code = ship_code(modules, options, travels=True)
        size_mb = code.workdir.size / (1 << 20)
        for r in range(args.rounds):
            for what in common.rotated(["unchanged", "edited", "empty"], r):
                os.chdir(empty if what == "empty" else folder)
                if what == "edited":
                    with open("mymodel.py", "a") as f:
                        f.write(f"# edit {r}\n")
                kernel[what].append(common.timed(lambda: ship_code(modules, options, travels=True))[0])
        os.chdir(folder)
        code = ship_code(modules, options, travels=True)
        blobs = {d: blob(d) for d in code.digests()}
        in_place = _rank_side(code, blobs, args.rounds, tmp)
        elsewhere = dataclasses.replace(code, workdir=dataclasses.replace(code.workdir, root=os.path.join(tmp, "x")))
        copies = _rank_side(elsewhere, blobs, args.rounds, tmp)  # the first fetches and unpacks; the rest only copy
        for r in range(max(3, args.rounds // 3)):
            for what in common.rotated(list(runs), r):
                os.chdir(folder if what == "5 MB folder" else empty)
                if what == "empty folder":
                    with open("mymodel.py", "w") as f:
                        f.write("VALUE = 1\n")
                runs[what].append(common.timed(lambda: jt.run(cell, n=2, local=True))[0])
    finally:
        os.chdir(common.REPO)
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: common.median(v) for k, v in kernel.items()}
    rows = [["kernel: name what travels, folder unchanged", common.fmt_s(med["unchanged"] * 1000)],
            ["kernel: ... after one module was edited", common.fmt_s(med["edited"] * 1000)],
            ["kernel: ... an empty folder", common.fmt_s(med["empty"] * 1000)],
            ["rank on the kernel's machine: set up in place", common.fmt_s(common.median(in_place) * 1000)],
            ["rank on another host: first run (fetch, unpack)", common.fmt_s(copies[0] * 1000)],
            ["rank on another host: rerun, folder unchanged", common.fmt_s(common.median(copies[1:]) * 1000)],
            ["--local run of 2 ranks, 5 MB folder (s)", common.fmt_s(common.median(runs["5 MB folder"]))],
            ["--local run of 2 ranks, empty folder (s)", common.fmt_s(common.median(runs["empty folder"]))]]
    print(common.table([f"median of {args.rounds} ({size_mb:.1f} MB, {code.workdir.files} files)", "ms"], rows))
    added_ms = (med["unchanged"] - med["empty"] + common.median(in_place)) * 1000
    kv = {"added_unchanged_ms": added_ms, "kernel_unchanged_ms": med["unchanged"] * 1000,
          "kernel_edited_ms": med["edited"] * 1000, "rank_in_place_ms": common.median(in_place) * 1000,
          "remote_first_ms": copies[0] * 1000, "remote_rerun_ms": common.median(copies[1:]) * 1000,
          "run_5mb_s": common.median(runs["5 MB folder"]), "run_empty_s": common.median(runs["empty folder"])}
    common.check_targets(kv, [("added_unchanged_ms", 10.0, False)])
    common.finish("bench_code_ship", {"machine": info, "kernel_s": kernel, "rank_in_place_s": in_place,
                                      "rank_elsewhere_s": copies, "runs_s": runs, "mb": size_mb}, started, kv)


if __name__ == "__main__":
    main()
