"""The prepared GPU check (issues 41 and 49): one command on a GPU machine, a verdict per step, every step under a
hard time limit and the whole under another, the results file written after every step.

    bash benchmarks/gpu_prepare.sh                       # once, on the GPU machine: prints the command to run
    python benchmarks/gpu_check.py [--out DIR]           # on a machine with a GPU
    python benchmarks/gpu_check.py --dry-run             # anywhere: every step on the CPU, to check the script itself

Steps (one failing or overrunning step does not stop the others; gpu_steps.py holds them):

1. ``%%distribute -n 1 --gpu --local``: an NCCL all_reduce on the rank's GPU, its value back in the notebook;
2. the default group's backends: ``get_backend()`` is "nccl", ``get_backend_config()`` has both, a CPU tensor, a
   CUDA tensor and an object through it, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` in the rank;
3. Horovod under ``--gpu``: the MNIST example's ``metric_average`` (a CPU tensor) beside allreduce and allgather of
   CUDA tensors;
4. ``TorchDistributor(num_processes=1, local_mode=True, use_gpu=True)``: pyspark's layout (one GPU, LOCAL_RANK 0);
5. ``--profile`` on a loop of matrix products: the rank's trace holds CUDA kernels;
6. the DDP tutorial's loop on a small ResNet: steps/s under ``%%distribute`` against the same loop in a plain process
   on the same GPU, alternating 3 rounds (target: ratio >= 0.97);
7. Lightning's ``Trainer(accelerator="gpu")``, 8. the Hugging Face ``Trainer``, 9. DeepSpeed's ZeRO-2, each fitting a
   small model on the GPU through ``%%distribute``;
10. ``examples/horovod_train.py`` as written, ``python -m jupyter_torchdist -n 1 --local --gpu``;
11. with 2 or more GPUs: ``-n <GPUs> --gpu`` running the tutorial's ``set_device(LOCAL_RANK)``, a GPU each;
12. with pyspark and Java: the all_reduce on the embedded Spark session, ``TorchDistributor(local_mode=False)`` there
    (a node per task), and a run after a Spark task initialised CUDA in its Python worker (the ranks are spawned).

Results: ``benchmarks/results/gpu_check.txt`` and ``.json`` (commit: ``JTD_COMMIT`` or git; date; machine: host, GPU,
driver, Python, torch, CUDA), rewritten after every step and copied to ``--out``; a run cut short keeps every step
done so far. ``--dry-run`` writes to ``build/gpu_check/`` instead (never the committed results). On the lent GPU
machines (no network, no Jupyter, no pyspark): benchmarks/README.md, "The GPU check".
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402
import gpu_steps  # noqa: E402

BUDGET_S = 480.0      # the whole check: no step starts after this, and a hard stop 30 s later
STEP_LIMIT_S = 150.0  # one step at most (the ResNet comparison: three rounds of two runs)


class Overtime(BaseException):
    """The whole check ran past its hard limit (SIGALRM): the step in progress is abandoned, the results kept."""


def _overtime(signum: int, frame: Any) -> None:
    raise Overtime()


def gpus_here() -> list[str]:
    """nvidia-smi's GPUs (this process never touches CUDA itself)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def machine(devices: list[str]) -> dict[str, Any]:
    import torch

    return {"host": socket.gethostname(), "gpus": devices, "python": sys.version.split()[0],
            "torch": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip,
            "commit": common.commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


class Results:
    """The rows so far, written (text and JSON) after every step into ``folder`` and ``out``."""

    def __init__(self, folder: str, out: str | None, info: dict[str, Any]) -> None:
        self.folders = [f for f in (folder, out) if f]
        self.info, self.rows, self.t0 = info, [], time.monotonic()

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.write()

    def text(self) -> str:
        i = self.info
        head = [f"# gpu_check: {i['date']}, commit {i['commit']}, on {i['host']}",
                f"# device: {'; '.join(i['gpus']) or 'none (dry run on the CPU)'}",
                f"# python {i['python']}, torch {i['torch']} (CUDA {i['cuda']}, HIP {i['hip']}), "
                f"{time.monotonic() - self.t0:.0f} s so far"]
        rows = [[r["step"], r["verdict"], r.get("seconds", "-"), str(r.get("detail", ""))[:300]] for r in self.rows]
        return "\n".join(head) + "\n" + common.table(["step", "verdict", "s", "detail"], rows) + "\n"

    def write(self) -> None:
        text = self.text()
        data = json.dumps({**self.info, "rows": self.rows}, indent=1, default=str)
        for folder in self.folders:
            os.makedirs(folder, exist_ok=True)
            for name, body in (("gpu_check.txt", text), ("gpu_check.json", data)):
                tmp = os.path.join(folder, f".{name}.tmp")
                with open(tmp, "w") as f:
                    f.write(body)
                os.replace(tmp, os.path.join(folder, name))


class Check:
    """Runs the steps: each under ``STEP_LIMIT_S`` (and what is left of ``BUDGET_S``), its verdict written at once."""

    def __init__(self, results: Results, gpu: bool) -> None:
        self.results, self.gpu, self.t0 = results, gpu, time.monotonic()

    def left(self) -> float:
        return BUDGET_S - (time.monotonic() - self.t0)

    def step(self, name: str, fn: Callable[[float], tuple[bool, str]], limit: float = 90.0) -> None:
        limit = min(limit, STEP_LIMIT_S, self.left())
        if limit <= 5:
            self.skip(name, f"past the {BUDGET_S:.0f} s budget")
            return
        t0 = time.monotonic()
        try:
            ok, detail = fn(limit)
            verdict = "PASS" if ok else "FAIL"
        except TimeoutError as exc:
            verdict, detail = "TIMEOUT", f"over its {limit:.0f} s limit: {str(exc)[:300]}"
        except Exception as exc:
            verdict, detail = "FAIL", f"{type(exc).__name__}: {str(exc)[-1500:]}"
        row = {"step": name, "verdict": verdict, "detail": detail, "seconds": round(time.monotonic() - t0, 1)}
        print(f"[{row['seconds']:6.1f} s] {verdict:7} {name}: {detail[:400]}", flush=True)
        self.results.add(row)

    def skip(self, name: str, why: str) -> None:
        print(f"           SKIP    {name}: {why}", flush=True)
        self.results.add({"step": name, "verdict": "SKIPPED", "detail": why})


def main() -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU (checks the script, not a GPU)")
    ap.add_argument("--out", help="also write the results here ($OUT on the device machine)")
    args = ap.parse_args()
    devices = gpus_here()
    if not devices and not args.dry_run:
        print("no GPU here (nvidia-smi lists none): use --dry-run to check the script on the CPU")
        return 2
    folder = os.path.join(REPO, "build", "gpu_check") if args.dry_run else common.RESULTS
    results = Results(folder, args.out, machine(devices))
    check = Check(results, gpu=not args.dry_run)
    kernel = gpu_steps.Notebook(gpu=check.gpu)
    signal.signal(signal.SIGALRM, _overtime)
    signal.alarm(int(BUDGET_S) + 30)
    try:
        gpu_steps.run_all(check, kernel, devices)
    except Overtime:
        results.add({"step": "(the check)", "verdict": "STOPPED",
                     "detail": f"past the hard limit of {BUDGET_S + 30:.0f} s: the step under way was abandoned"})
    finally:
        signal.alarm(0)
        kernel.close()
    print(results.text())
    return 0 if all(r["verdict"] in ("PASS", "SKIPPED") for r in results.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
