"""Repo-wide test setup.

Only what every test run of this repository needs: the pytester plugin.  Heavier setup
(environment isolation, the torch preload, ``tests/`` on ``sys.path``) lives in
``tests/conftest.py`` so that ``pytest examples`` (its own rootdir) stays unaffected.
"""

pytest_plugins = ["pytester"]
