#!/usr/bin/env bash
# Every benchmark, one after another, then the chart and the README tables:
#     bash benchmarks/run_all.sh            (about 22-27 minutes on a quiet 2-core machine)
# Each script waits (up to BENCH_WAIT_S seconds, default 1200) for the 1-minute load average to drop
# below BENCH_MAX_LOAD (default 1.0) before it starts: other work on a 2-core machine distorts timings.
# Output: benchmarks/results/<script>.txt (what it printed), .json (the numbers), .err (library noise).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export BENCH_WAIT_S="${BENCH_WAIT_S:-1200}" BENCH_MAX_LOAD="${BENCH_MAX_LOAD:-1.0}" PYTHONUNBUFFERED=1
mkdir -p benchmarks/results

# Benchmark-only tools (none is a package dependency): the optional extra "bench" in pyproject.toml
# (matplotlib for the chart; pyarrow + pandas < 3, which TorchDistributor(local_mode=False) needs for
# mapInArrow; accelerate for notebook_launcher; ...). torch is pinned in the same command so that pip
# never swaps in a CUDA torch.
$PY -m pip install -q -e ".[bench]" "torch==2.13.0" \
  || echo "the benchmark tools (.[bench]) could not be installed: the scripts that need one say so" >&2

status=0
for script in bench_latency bench_magic bench_scaling bench_throughput bench_horovod bench_kept bench_background bench_data bench_connect \
              bench_restarts bench_first_cell bench_late_executors bench_multihost bench_report bench_debug bench_gpu bench_footprint bench_scale bench_runs_panel bench_code_ship profile_phases; do
  echo "=== $script ($(date +%H:%M:%S), $(cut -d' ' -f1-3 /proc/loadavg))"
  if ! $PY "benchmarks/$script.py" 2>"benchmarks/results/$script.err" | tee "benchmarks/results/$script.txt"; then
    echo "!!! $script failed: see benchmarks/results/$script.err" >&2
    status=1
  fi
done
$PY benchmarks/make_report.py || status=1
exit $status
