#!/usr/bin/env bash
# Prepare a GPU machine for benchmarks/gpu_check.py: one command, from a copy of this repository, then the line it
# prints runs the check. Two kinds of machine (benchmarks/README.md, "The GPU check"):
#
#   online   PyPI reachable: a venv (.gpu-venv, next to the checkout) with the project's torch (torch==2.13.0, the
#            CUDA build PyPI serves for Linux) and what the check's steps use beside it (Jupyter's kernel, pyspark,
#            Lightning, Transformers, DeepSpeed); the package itself runs from the checkout (PYTHONPATH), so no
#            Node build is needed; Java 17 from apt when missing and apt reachable (the Spark steps).
#   offline  nothing reachable (the lent GPU machines): the machine's own python3 and CUDA torch (whatever version it
#            has: the results file says which), the kernel's packages from the wheels carried in .whl/ (made here
#            first by `bash benchmarks/gpu_wheels.sh`: they must travel with the tree), into /tmp/site. pyspark (about
#            490 MB) and a JDK (about 260 MB) cannot travel in a 64 MiB tree, and this checkout's .venv cannot either
#            (3 GB, CPU torch, Python 3.11): the Spark steps are then skipped, and the results say so.
#
# Usage: bash benchmarks/gpu_prepare.sh [--offline|--online]   (default: online if PyPI answers within 5 s)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"
if [ -z "$mode" ]; then
  if python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=5)" 2>/dev/null
  then mode=--online; else mode=--offline; fi
fi

case "$mode" in
--online)
  venv="$(pwd)/../.gpu-venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # torch pinned in the same command as everything that depends on it (a lone install may pull another torch)
  "$venv/bin/python" -m pip install -q "torch==2.13.0" pyspark cloudpickle ipython ipywidgets anywidget ipykernel \
    jupyter_client nbformat numpy lightning transformers accelerate wheel setuptools
  DS_BUILD_OPS=0 "$venv/bin/python" -m pip install -q --no-build-isolation deepspeed \
    || echo "gpu_prepare: DeepSpeed did not install: its step will fail and say so" >&2
  if ! command -v java >/dev/null 2>&1; then
    (apt-get update -q && apt-get install -y -q openjdk-17-jre-headless) >/dev/null 2>&1 \
      || echo "gpu_prepare: no Java (apt unreachable): the Spark steps will be skipped" >&2
  fi
  python="$venv/bin/python"
  prefix="PYTHONPATH=$(pwd) "
  ;;
--offline)
  if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "gpu_prepare: --offline needs the kernel's wheels in .whl/: run 'bash benchmarks/gpu_wheels.sh' on a machine" \
         "with PyPI first, and carry .whl with the tree" >&2
    exit 2
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  python=python3
  prefix="PYTHONPATH=/tmp/site:$(pwd) "
  ;;
*)
  echo "usage: bash benchmarks/gpu_prepare.sh [--offline|--online]" >&2
  exit 2
  ;;
esac

# What the check will find, said once (the check writes the same into its results file).
env ${prefix} "$python" - <<'EOF'
import shutil
import torch
try:
    import pyspark
    spark = f"pyspark {pyspark.__version__}"
except ImportError:
    spark = "no pyspark"
print(f"gpu_prepare: torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip}); {spark}; "
      f"java {'yes' if shutil.which('java') else 'no'}")
EOF
echo "gpu_prepare: ready. Run:"
echo "  ${prefix}PYTHONUNBUFFERED=1 timeout 560 $python benchmarks/gpu_check.py --out \${OUT:-benchmarks/results}"
