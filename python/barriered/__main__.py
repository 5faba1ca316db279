"""``python -m barriered``: the command line."""

import sys

from barriered.cli import main

sys.exit(main())
