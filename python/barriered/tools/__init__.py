"""Tools over a snapshot path for people: the checkpoint history, what a checkpoint
holds, the checkpoint plot and progress reporting. No Spark needed (the CLI uses them
directly; :mod:`barriered.views` wraps them for notebooks)."""
