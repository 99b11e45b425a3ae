"""What the kernel knows about a run, folded from messages: the run, each rank, its status, stalls, places, resource
use, the many-rank summary and the one snapshot every view draws. Pure: no I/O, no threads, no clock."""
