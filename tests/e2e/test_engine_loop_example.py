"""``examples/engine_loop``: the gate on the example engine's own loop fails on a shape change in the engine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers import REPO_ROOT
from warm_python import warm_python

TEST = "engine_loop/test_engine_loop.py::test_engine_capture_loop_matches_goldens"


def test_a_deliberate_shape_change_in_the_engine_fails_naming_the_op_and_sizes(tmp_path: Path) -> None:
    examples = tmp_path / "examples"
    shutil.copytree(REPO_ROOT / "examples", examples, ignore=shutil.ignore_patterns("__pycache__"))
    engine = examples / "adapter" / "mini_engine.py"
    source = engine.read_text(encoding="utf-8")
    wider = source.replace(
        "self.config = config or DecoderConfig()", "self.config = config or DecoderConfig(intermediate_size=192)"
    )
    assert wider != source, "mini_engine.py no longer builds its DecoderConfig() where this test widens its MLP"
    command = [warm_python(), "-m", "pytest", TEST, "-p", "no:cacheprovider", "--graph-capture-device=cpu"]

    def gate() -> subprocess.CompletedProcess:
        return subprocess.run(command, cwd=examples, capture_output=True, text=True, timeout=600)

    passed = gate()
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-3000:]
    engine.write_text(wider, encoding="utf-8")
    failed = gate()
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    assert "graph capture of MiniEngine does not match its goldens" in failed.stdout
    # The MLP's activation changed shape at every batch size: named with the op and the sizes.
    assert "bs=1,2,4,8: ~ aten::silu [[bs,128]] → [[bs,192]]" in failed.stdout, failed.stdout[-3000:]
