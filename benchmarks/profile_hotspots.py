"""cProfile of our side of each benchmark, to find where a missed target's time goes.

``python benchmarks/profile_hotspots.py [capture|summarize|golden ...] [--top N]``

* ``capture`` — B1's summary-only capture (``capture_runner``, trace=off) of the
  default batch sizes, and for contrast the plain scheduled-profiler loop and the
  exports; then the summary-only capture and the plain loop at B1's realistic model size;
* ``summarize`` — ``summarize_trace_file`` of each real trace;
* ``golden`` — B4's per-key golden check of the 36 batch sizes.

Writes ``bench_out/profiles/<name>.txt`` (sorted by own time and by cumulative
time) and prints the top lines.  Profiling slows Python code down several
times; use it to rank hot spots, never as a timing.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import warnings
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from common import REPO, real_traces_dir, stderr_to  # noqa: E402

OUT = REPO / "bench_out" / "profiles"


def _profile(name: str, fn: Callable[[], object], top: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    text = io.StringIO()
    for order in ("tottime", "cumulative"):
        text.write(f"==== {name}: sorted by {order}\n")
        pstats.Stats(profiler, stream=text).strip_dirs().sort_stats(order).print_stats(top)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.txt").write_text(text.getvalue(), encoding="utf-8")
    print(text.getvalue())


def profile_capture(top: int) -> None:
    import b1_capture
    import torch

    from pytest_graphcapture.engine.runner import default_batch_sizes

    torch.set_num_threads(1)
    sizes = default_batch_sizes(32)
    work = REPO / "bench_out"
    with stderr_to(work / "profile_stderr.log"):
        for variant in ("plain-profiler", "ours-summary", "ours-export-all", "plain-export-all"):
            b1_capture.run_variant(variant, sizes, "cpu", work / "b1_profile")  # warm
        for variant in ("plain-profiler", "ours-summary", "plain-export-all", "ours-export-all"):
            _profile(
                f"capture_{variant}",
                lambda v=variant: b1_capture.run_variant(v, sizes, "cpu", work / "b1_profile"),
                top,
            )
        # The realistic size (B1's target): per-key costs that grow with the ops recorded show here.
        realistic_sizes = [1, 2, 4, 8]
        runner = b1_capture.make_runner("realistic", realistic_sizes, "cpu")
        for variant in ("plain-profiler", "ours-summary"):
            b1_capture.run_variant(variant, realistic_sizes, "cpu", work / "b1_profile", runner=runner)  # warm
            _profile(
                f"capture_realistic_{variant}",
                lambda v=variant: b1_capture.run_variant(v, realistic_sizes, "cpu", work / "b1_profile", runner=runner),
                top,
            )


def profile_summarize(top: int) -> None:
    from pytest_graphcapture.keys import CaptureKey
    from pytest_graphcapture.summary.files import summarize_trace_file

    for path in sorted(real_traces_dir().glob("*.json.gz")):
        _profile(
            f"summarize_{path.name.split('__')[0]}",
            lambda p=path: summarize_trace_file(p, key=CaptureKey("bench", 1)),
            top,
        )


def profile_golden(top: int) -> None:
    import b4_golden

    from pytest_graphcapture.engine.runner import default_batch_sizes

    work = REPO / "bench_out"
    golden_dir = work / "b4_profile_goldens"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, _paths = b4_golden.build_goldens(default_batch_sizes(256), golden_dir, work)
    b4_golden.time_check(result, golden_dir)
    _profile("golden_check", lambda: b4_golden.time_check(result, golden_dir), top)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/profile_hotspots.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "targets", nargs="*", default=["capture", "summarize", "golden"], choices=["capture", "summarize", "golden"]
    )
    parser.add_argument("--top", type=int, default=25, help="lines per listing (default 25)")
    args = parser.parse_args(argv)
    for target in args.targets:
        {"capture": profile_capture, "summarize": profile_summarize, "golden": profile_golden}[target](args.top)
    print(f"profiles written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
