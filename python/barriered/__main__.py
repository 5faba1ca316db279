"""``python -m barriered``: the command line (ends the process with its exit code)."""

from barriered.cli import main

main()
