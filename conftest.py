"""Repo-wide test setup.

Only what every test run of this repository needs: the pytester plugin.  Heavier setup
(environment isolation, the torch preload, ``tests/`` on ``sys.path``) lives in
``tests/conftest.py`` so that ``pytest examples`` (its own rootdir) stays unaffected.
"""

import os
import sys

pytest_plugins = ["pytester"]

# Importing this conftest puts the repository root on sys.path (pytest's "prepend" import
# mode).  The package is installed (editable); with the root on sys.path as well, inner
# pytester runs see pytest_graphcapture as imported outside pytest's assertion rewriting
# and warn ("Module already imported so cannot be rewritten"), which fails `-W error` runs.
_ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT or p == ""]
