"""The prepared GPU check (issue 41): one command, at most 6 minutes on one H100, in a real kernel.

    python3 benchmarks/gpu_check.py [--out DIR]      # on a machine with a GPU
    python3 benchmarks/gpu_check.py --dry-run         # anywhere: every step on the CPU, to check the script itself

Steps, each with its verdict (one failing step does not stop the others):

1. ``%%distribute -n 1 --gpu --local``: an NCCL all_reduce on the rank's GPU, its value back in the notebook;
2. the DDP tutorial's loop on a small ResNet (synthetic 32x32 images, batch 128): steps/s under ``%%distribute``
   against the same loop in a plain process on the same GPU, alternating 3 rounds (target: ratio >= 0.97);
3. Lightning's ``Trainer(accelerator="gpu", strategy="ddp")`` and 4. Hugging Face's ``Trainer`` fit a small model
   on the GPU through ``%%distribute``;
5. ``TorchDistributor(num_processes=1, local_mode=True, use_gpu=True)``;
6. ``examples/horovod_train.py`` as written, ``python -m jupyter_torchdist -n 1 --local --gpu``;
7. with 2 or more GPUs: ``-n <GPUs> --gpu`` running the tutorial's ``torch.cuda.set_device(LOCAL_RANK)`` lines,
   every rank on a GPU of its own;
8. with pyspark and Java there: the same all_reduce on the embedded Spark session.

Writes ``benchmarks/results/gpu_check.txt`` and ``.json`` (device, driver, date, commit: ``JTD_COMMIT`` or git)
and copies them to ``--out``. On the lent GPU machines (Python 3.12, torch with CUDA, Lightning and Transformers, no
Jupyter, no pyspark, no network), the kernel's packages travel as wheels: ``bash benchmarks/gpu_wheels.sh`` here
fetches them into ``.whl/``, and the device command starts with installing them (benchmarks/README.md).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402

BUDGET_S = 330.0

SETUP = f"""\
%load_ext jupyter_torchdist
import sys, cloudpickle
sys.path.insert(0, {HERE!r})
import gpu_jobs
cloudpickle.register_pickle_by_value(gpu_jobs)
import jupyter_torchdist as jt
"""


class Check:
    """The steps' verdicts and numbers, in order; a step past the budget is skipped."""

    def __init__(self, gpu: bool) -> None:
        self.gpu, self.flag, self.t0 = gpu, "--gpu" if gpu else "", time.monotonic()
        self.rows: list[dict[str, Any]] = []

    def step(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        if time.monotonic() - self.t0 > BUDGET_S:
            self.rows.append({"step": name, "verdict": "SKIPPED", "detail": f"past the {BUDGET_S:.0f} s budget"})
            return
        t0 = time.monotonic()
        try:
            ok, detail = fn()
            verdict = "PASS" if ok else "FAIL"
        except Exception as exc:
            verdict, detail = "FAIL", f"{type(exc).__name__}: {str(exc)[-1500:]}"
        row = {"step": name, "verdict": verdict, "detail": detail, "seconds": round(time.monotonic() - t0, 1)}
        self.rows.append(row)
        print(f"[{row['seconds']:6.1f} s] {verdict:4} {name}: {detail}", flush=True)

    def skip(self, name: str, why: str) -> None:
        self.rows.append({"step": name, "verdict": "SKIPPED", "detail": why})
        print(f"           SKIP {name}: {why}", flush=True)


def value(ks: common.KernelSession, code: str, timeout: float = 180) -> Any:
    import ast

    return ast.literal_eval(ks.run(code, timeout=timeout)["result"])


def plain_resnet(gpu: bool, steps: int, warmup: int, batch: int) -> float:
    code = (f"import json, sys; sys.path.insert(0, {HERE!r}); import gpu_jobs; "
            f"print('RESULT', json.dumps(gpu_jobs.plain_resnet({steps}, {warmup}, {batch}, {gpu!r})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"plain process failed: {done.stderr[-1500:]}")
    return float(json.loads(lines[0][len("RESULT "):])["steps_per_s"])


def resnet_ratio(ks: common.KernelSession, c: Check) -> tuple[bool, str]:
    steps, warmup, batch = (60, 15, 128) if c.gpu else (4, 1, 16)
    ours: list[float] = []
    plain: list[float] = []
    cell = f"%%distribute -n 1 {c.flag} --local -q\ngpu_jobs.resnet_steps({steps}, {warmup}, {batch})"
    for r in range(3):
        order = [("ours", ours), ("plain", plain)][:: -1 if r % 2 else 1]
        for who, into in order:
            into.append(value(ks, cell)["steps_per_s"] if who == "ours" else plain_resnet(c.gpu, steps, warmup, batch))
    ratio = statistics.median(ours) / statistics.median(plain)
    c.rows.append({"step": "resnet numbers", "verdict": "INFO", "ours": ours, "plain": plain, "ratio": ratio})
    return ratio >= 0.97 or not c.gpu, (f"ours {common.fmt_list(ours)} steps/s, plain {common.fmt_list(plain)}; "
                                        f"ratio {ratio:.3f} (target >= 0.97)")


def cli_horovod(c: Check) -> tuple[bool, str]:
    args = [sys.executable, "-m", "jupyter_torchdist", "-n", "1", "--local", *([c.flag] if c.gpu else []),
            os.path.join(REPO, "examples", "horovod_train.py"), "--epochs", "1", "--train-size", "1024",
            "--checkpoint", os.path.join(common.RESULTS, "..", "..", "build", "horovod_check.pt")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=240, cwd=REPO)
    said = [ln for ln in done.stdout.splitlines() if "test loss" in ln] or (done.stdout + done.stderr).splitlines()[-3:]
    return done.returncode == 0 and "test loss" in done.stdout, " | ".join(said)[-400:]


def gpus_here() -> list[str]:
    """nvidia-smi's GPUs (this process never touches CUDA itself)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def spark_here() -> str | None:
    """Why the embedded Spark step cannot run here (None when it can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed here"
    return None if shutil.which("java") else "no Java here"


def same_device(name: str, expect: str) -> bool:
    """``cpu:0`` is ``cpu``; ``cuda`` alone is not ``cuda:0`` (it means the current device, whichever)."""
    return name.removesuffix(":0") == expect.removesuffix(":0") if expect.startswith("cpu") else name == expect


def run_steps(ks: common.KernelSession, c: Check, devices: list[str]) -> None:
    flag = c.flag
    expect = "cuda:0" if c.gpu else "cpu"

    def allreduce() -> tuple[bool, str]:
        v = value(ks, f"%%distribute -n 1 {flag} --local -q\ngpu_jobs.nccl_allreduce()")
        return v["sum"] == 1.0 and v["device"] == expect and v["backend"] == ("nccl" if c.gpu else "gloo"), str(v)

    def fit(job: str) -> Callable[[], tuple[bool, str]]:
        def go() -> tuple[bool, str]:
            v = value(ks, f"%%distribute -n 1 {flag} --local -q\ngpu_jobs.{job}()", timeout=240)
            dev = same_device(v["device"], expect) and same_device(v.get("model_device", expect), expect)
            learned = v.get("last_loss", 0.0) < v.get("first_loss", 1.0) or v.get("steps", 0) > 0
            return dev and learned, str(v)
        return go

    def distributor() -> tuple[bool, str]:
        v = value(ks, "from jupyter_torchdist import TorchDistributor\nTorchDistributor(num_processes=1, "
                      f"local_mode=True, use_gpu={c.gpu}).run(gpu_jobs.nccl_allreduce)")
        return v["sum"] == 1.0 and v["device"] == expect, str(v)

    c.step("all_reduce on the rank's GPU, value back", allreduce)
    c.step("DDP tutorial loop, small ResNet: ours / plain process", lambda: resnet_ratio(ks, c))
    c.step("Lightning Trainer(accelerator='gpu') in %%distribute", fit("lightning_fit"))
    c.step("Hugging Face Trainer in %%distribute", fit("transformers_fit"))
    c.step("TorchDistributor(local_mode=True, use_gpu=True)", distributor)
    c.step("examples/horovod_train.py --gpu from the command line", lambda: cli_horovod(c))
    several_gpus(ks, c, devices)
    why = spark_here()
    if why is None:
        c.step("all_reduce on the embedded Spark session", lambda: (
            value(ks, f"%%distribute -n 1 {flag} -q\ngpu_jobs.nccl_allreduce()")["sum"] == 1.0, "ok"))
    else:
        c.skip("all_reduce on the embedded Spark session", why)


def several_gpus(ks: common.KernelSession, c: Check, devices: list[str]) -> None:
    """With several GPUs: a rank on each, the tutorial's set_device(LOCAL_RANK) lines, each on a GPU of its own."""
    n = len(devices)
    if not c.gpu or n < 2:
        c.skip("ranks on several GPUs of one host", f"{n} GPU(s) here")
        return

    def several() -> tuple[bool, str]:
        ranks = value(ks, f"%%distribute -n {n} --gpu --local -q --all-ranks\ngpu_jobs.local_rank_tutorial()")
        return len({r["uuid"] for r in ranks}) == n and all(r["sum"] == n for r in ranks), str(ranks)

    c.step(f"{n} ranks, torch.cuda.set_device(LOCAL_RANK) on each", several)


def report(c: Check, devices: list[str], started: float) -> str:
    import torch

    head = [f"# gpu_check: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, commit {common.commit()}",
            f"# device: {'; '.join(devices) or 'none (dry run on the CPU)'}",
            f"# python {sys.version.split()[0]}, torch {torch.__version__}, total {time.monotonic() - started:.0f} s"]
    rows = [[r["step"], r["verdict"], r.get("seconds", "-"), r["detail"][:300]] for r in c.rows if "detail" in r]
    return "\n".join(head) + "\n" + common.table(["step", "verdict", "s", "detail"], rows) + "\n"


def main() -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU (checks the script, not a GPU)")
    ap.add_argument("--out", help="also copy the results here ($OUT on the device machine)")
    args = ap.parse_args()
    devices = gpus_here()
    if not devices and not args.dry_run:
        print("no GPU here (nvidia-smi lists none): use --dry-run to check the script on the CPU")
        return 2
    started = time.monotonic()
    c = Check(gpu=not args.dry_run)
    env = {"JUPYTER_TORCHDIST_WARMUP": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
    ks = common.KernelSession(env=env)
    try:
        ks.run(SETUP)
        run_steps(ks, c, devices)
    finally:
        ks.close()
    text = report(c, devices, started)
    print(text)
    if not args.dry_run:
        common.save("gpu_check", {"rows": c.rows, "devices": devices, "commit": common.commit()})
        with open(os.path.join(common.RESULTS, "gpu_check.txt"), "w") as f:
            f.write(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name in ("gpu_check.txt", "gpu_check.json"):
            if os.path.exists(os.path.join(common.RESULTS, name)) and not args.dry_run:
                shutil.copy(os.path.join(common.RESULTS, name), args.out)
    return 0 if all(r["verdict"] in ("PASS", "SKIPPED", "INFO") for r in c.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
