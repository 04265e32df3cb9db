"""Training: the plan (what a request means), the loop, the run directory and its checkpoints,
the lock, the schedule and distributed processes."""
