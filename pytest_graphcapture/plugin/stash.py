"""Where the fixtures find their session objects: the keys of ``config.stash``.

One :class:`~.session.CaptureSession` and one :class:`~.golden_session.GoldenSession`
live in each pytest process; the plugin's configure hook stores them under these keys
and each fixture reads them back.
"""

from __future__ import annotations

import pytest

from .golden_session import GoldenSession
from .session import CaptureSession

CAPTURE = pytest.StashKey[CaptureSession]()
GOLDEN = pytest.StashKey[GoldenSession]()
