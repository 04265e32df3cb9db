"""Training: the plan, the loop, its schedule and state, the run directory and its checkpoints, processes."""
