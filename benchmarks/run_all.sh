#!/usr/bin/env bash
# Every benchmark, one after another, then the chart and the README tables:
#     bash benchmarks/run_all.sh            (about 20-25 minutes on a quiet 2-core machine)
# Each script waits (up to BENCH_WAIT_S seconds, default 1200) for the 1-minute load average to drop
# below BENCH_MAX_LOAD (default 1.0) before it starts: other work on a 2-core machine distorts timings.
# Output: benchmarks/results/<script>.txt (what it printed), .json (the numbers), .err (library noise).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export BENCH_WAIT_S="${BENCH_WAIT_S:-1200}" BENCH_MAX_LOAD="${BENCH_MAX_LOAD:-1.0}" PYTHONUNBUFFERED=1
mkdir -p benchmarks/results

# Benchmark-only tools (none is a package dependency):
#   matplotlib for the chart; pyarrow (+ pandas < 3) which TorchDistributor(local_mode=False) needs for
#   mapInArrow; accelerate for notebook_launcher, with --no-deps so pip never swaps in a CUDA torch.
$PY -c "import matplotlib" 2>/dev/null || $PY -m pip install -q matplotlib
$PY -c "import pyarrow, pandas" 2>/dev/null || $PY -m pip install -q pyarrow "pandas<3"
if ! $PY -c "import accelerate" 2>/dev/null; then
  $PY -m pip install -q --no-deps accelerate && $PY -m pip install -q psutil safetensors huggingface_hub \
    || echo "accelerate could not be installed: bench_latency.py will say so" >&2
fi

status=0
for script in bench_latency bench_magic bench_scaling bench_throughput bench_report bench_gpu \
              profile_phases; do
  echo "=== $script ($(date +%H:%M:%S), $(cut -d' ' -f1-3 /proc/loadavg))"
  if ! $PY "benchmarks/$script.py" 2>"benchmarks/results/$script.err" | tee "benchmarks/results/$script.txt"; then
    echo "!!! $script failed: see benchmarks/results/$script.err" >&2
    status=1
  fi
done
$PY benchmarks/make_report.py || status=1
exit $status
