"""Detached runs: ``%%distribute --detach`` runs that go on when their kernel restarts, dies or shuts down.

The kernel hands the run to a runner of its own (``runner.py``: a process in its own session that supervises the
run as a kernel supervises a background run) and keeps a handle that follows it (``client.py``); any later kernel of
the same user attaches to it by its id. Between them, an owner-only folder (``store.py``) holds what was handed over
and how the run ended.
"""
