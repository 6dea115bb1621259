"""``python -m pytest_graphcapture`` runs the ``graphcapture`` command line."""

import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
