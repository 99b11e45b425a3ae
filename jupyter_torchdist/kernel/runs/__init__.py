"""Running a run: the one run path (launch), the rank set and channel it runs on, whose turn it is, the supervisor
that drives it, restarts, debugging, requests from the view, the run handle and the kernel's registry of runs."""
