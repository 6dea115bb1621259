"""Regenerate docs/picture.png from a real run: the examples' decoder with its MLP widened (128 → 192).

Copies ``examples/`` to a temporary folder, overrides its runner with the widened decoder,
runs the gate with ``--golden-out`` (the goldens are the examples' own, so every size
fails), draws ``graphcapture show obtained --html --against goldens`` and screenshots the
page in headless Chromium (Debian: ``apt-get install -y chromium``).

    python scripts/gen_picture.py [OUT.png]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFTEST = """
import pytest
from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


@pytest.fixture
def decode_runner():
    return TinyDecodeRunner([1, 2, 4, 8, 12, 16, 24, 32], device="cpu", config=DecoderConfig(intermediate_size=192))
"""


def main(out: Path) -> int:
    browser = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
    )
    if browser is None:
        print("no Chromium found: install it (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        examples = Path(tmp) / "examples"
        shutil.copytree(REPO / "examples", examples, ignore=shutil.ignore_patterns("__pycache__"))
        (examples / "conftest.py").write_text(CONFTEST, encoding="utf-8")
        test = "test_decode_graphs.py::test_decode_graphs_match_goldens"
        gate = [sys.executable, "-m", "pytest", test, "-p", "no:cacheprovider", "-n0", "--golden-out", "obtained"]
        if subprocess.run(gate, cwd=examples, capture_output=True).returncode != 1:
            print("the widened decoder did not fail its goldens: nothing to picture", file=sys.stderr)
            return 1
        page = examples / "picture.html"
        show = ["graphcapture", "show", "obtained", "--html", str(page), "--against", "goldens"]
        subprocess.run(show, cwd=examples, check=True)
        shot = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1700,1000"]
        shot += [f"--user-data-dir={Path(tmp) / 'profile'}", f"--screenshot={out.resolve()}", page.as_uri()]
        subprocess.run(shot, check=True, capture_output=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "picture.png"))
