"""What runs in the notebook's kernel: the magic, cell compilation and pickling, the one run path,
the supervisor and the run state. Never imported on a rank."""
