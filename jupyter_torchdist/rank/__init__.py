"""What runs on a rank's side: the agent that forks and watches it, the rank's main, its reporting
client, output capture, the tqdm bridge, the rank shell and the rank-side API. Imports nothing of
the kernel side."""
