"""The script torchrun (and TorchDistributor's file mode, if ever wanted) runs: one job from jobs.py.

    torchrun --nproc_per_node 2 benchmarks/ddp_script.py trivial_ddp '{"steps": 10}'

Every rank prints one line ``RESULT <json>`` with its return value.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jobs

if __name__ == "__main__":
    name = sys.argv[1]
    kwargs = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    value = getattr(jobs, name)(**kwargs)
    print("RESULT " + json.dumps(value), flush=True)
