"""What every part of the package shares, below all of it: the contract between kernel, launchers and ranks
(``contract*.py``), the options (``options.py``) and errors (``errors.py``), a sweep's grid, the GPU placement and
rendezvous rules, and small helpers (pickling, sources for tracebacks, version checks, grouping texts, units).
Nothing here imports another part of the package, pyspark or torch at import time."""
