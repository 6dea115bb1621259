"""pytest-graphcapture benchmarks (issue #6): ``python benchmarks/run.py [--quick] [--skip-hta]``.

B1 capture cost of the embedded runner against bare loops; B2 trace summarize
time against the parse floor, and peak memory; B3 our trace load against
Holistic Trace Analysis; B4 the golden check of 36 batch sizes against reading
the files; B5 reading a 5,000-node graph dump (DOT); B6 gating an engine's own
capture loop against gating it through an adapter; B7 ``graphcapture check``, ``diff`` and
``show`` of an engine-written trace of 61 keys against ``graphcapture summarize`` of it.  Every benchmark interleaves its variants round by round and reports
medians; the run ends with one table, also written as Markdown (``--out``).
See docs/benchmarks.md for what each row means and the measured figures.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # run from a checkout without installing

from common import REPO, Row, Section, machine_description, markdown_table, progress, real_traces_dir, text_table  # noqa: E402

BENCHES = ("B1", "B2", "B3", "B4", "B5", "B6", "B7")
LARGE_SOURCE = "hta_negative_queue_length_values_check__rank0.json.gz"
QUICK_TRACE = "tracelens_sglang_decode__sglang_Qwen3-8B_decode.json.gz"
#: B1 at the realistic model size (benchmarks/b1_capture.py MODELS): batch sizes and rounds, sized to
#: take about 2 minutes on 2 cores (a key costs 0.15-0.4 s there, most of it the model's forwards).
#: The smallest sizes are the hardest case for the summary-only ratio: the least model time per key
#: beside a per-key cost that does not depend on the batch size.
REALISTIC_BATCH_SIZES = (1, 2, 4, 8)
REALISTIC_ROUNDS = 9


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python benchmarks/run.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: few batch sizes, one round, the smallest real trace, no synthetic trace",
    )
    parser.add_argument("--skip-hta", action="store_true", help="skip B3 (no HTA venv is created)")
    parser.add_argument(
        "--only",
        default=",".join(BENCHES),
        metavar="LIST",
        help="comma-separated subset of B1,B2,B3,B4,B5,B6,B7 (default: all)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench_out" / "results.md",
        help="Markdown file for the table (default: bench_out/results.md)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=REPO / "bench_out",
        help="scratch folder: synthetic trace, HTA venv, temporary goldens (default: bench_out/)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="capture device of B1 (auto: the GPU when torch sees one)",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="B1 rounds of the tiny model (default 11; 1 with --quick)"
    )
    parser.add_argument(
        "--b1-models",
        default="tiny,realistic",
        metavar="LIST",
        help="B1's model sizes: comma-separated subset of tiny,realistic (default: both)",
    )
    parser.add_argument(
        "--realistic-rounds",
        type=int,
        default=None,
        help=f"B1 rounds of the realistic model (default {REALISTIC_ROUNDS}; 1 with --quick)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads for B1 and B6 (default: 1 on CPU, torch's default on a GPU)",
    )
    parser.add_argument(
        "--large-mb",
        type=int,
        default=200,
        help="minimum uncompressed size of the synthetic trace in MiB (default 200)",
    )
    parser.add_argument(
        "--huge-mb",
        type=int,
        default=2048,
        help="minimum uncompressed size of the huge synthetic trace, summarized by us alone (default 2048; 0: none)",
    )
    parser.add_argument(
        "--engine-keys",
        type=int,
        default=None,
        help="B7's keys in its one engine trace (default 61; --quick 4): more keys, a larger trace",
    )
    parser.add_argument("--engine-rounds", type=int, default=None, help="B7's rounds (default 5; --quick 1)")
    parser.add_argument(
        "--hta-venv",
        type=Path,
        default=None,
        help="virtual environment for HTA (default: <work-dir>/hta-venv; created when missing)",
    )
    args = parser.parse_args(argv)
    only = {part.strip().upper() for part in args.only.split(",") if part.strip()}
    unknown = sorted(only - set(BENCHES))
    if unknown or not only:
        parser.error(f"--only: unknown benchmark(s) {', '.join(unknown) or '(none given)'}; use {','.join(BENCHES)}")
    if args.skip_hta:
        only.discard("B3")
    args.only = only
    if args.engine_keys is not None and args.engine_keys < 2:
        parser.error("--engine-keys must be at least 2 (one FULL shape and the PIECEWISE one)")
    if args.engine_rounds is not None and args.engine_rounds < 1:
        parser.error("--engine-rounds must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.realistic_rounds is not None and args.realistic_rounds < 1:
        parser.error("--realistic-rounds must be at least 1")
    models = [part.strip().lower() for part in args.b1_models.split(",") if part.strip()]
    wrong = [m for m in models if m not in ("tiny", "realistic")]
    if wrong or not models:
        parser.error(f"--b1-models: unknown size(s) {', '.join(wrong) or '(none given)'}; use tiny,realistic")
    args.b1_models = list(dict.fromkeys(models))
    if args.large_mb < 1:
        parser.error("--large-mb must be at least 1")
    return args


def _device(choice: str) -> str:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device cuda: torch {torch.__version__} sees no GPU")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return "n/a"


def run_b1(args: argparse.Namespace, device: str) -> Section:
    import b1_capture

    from pytest_graphcapture.engine.runner import default_batch_sizes

    plans = {
        "tiny": ([1, 2] if args.quick else default_batch_sizes(32), args.rounds or (1 if args.quick else 11)),
        "realistic": (
            [1] if args.quick else list(REALISTIC_BATCH_SIZES),
            args.realistic_rounds or (1 if args.quick else REALISTIC_ROUNDS),
        ),
    }
    threads = args.threads or (1 if device == "cpu" else None)
    return b1_capture.run(
        plans=[(model, *plans[model]) for model in args.b1_models],
        device=device,
        work_dir=args.work_dir,
        threads=threads,
    )


def run_b2_b3(args: argparse.Namespace) -> Section:
    import b2_traces
    import hta_env
    from synthetic import make_large_trace

    section = Section()
    folder = real_traces_dir()
    real = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not real:
        section.notes.append(
            f"B2/B3 skipped: no real traces in {folder} (set GRAPH_CAPTURE_REAL_TRACES to "
            "the folder holding the shared real_traces)"
        )
        return section
    if args.quick:
        real = [p for p in real if p.name == QUICK_TRACE] or real[:1]
    traces = [b2_traces.TraceFile(p, p.name[: -len(".json.gz")], 1 if args.quick else 5) for p in real]
    if not args.quick:
        source = folder / LARGE_SOURCE
        if source.exists():
            progress(f"B2: making the synthetic trace (≥ {args.large_mb} MiB JSON) from {source.name}")
            dest = args.work_dir / "synthetic" / "synthetic_large__rank0.json.gz"
            meta = make_large_trace(source, dest, args.large_mb * 2**20)
            traces.append(
                b2_traces.TraceFile(dest, f"synthetic_large ({meta['copies']} copies of {source.name[:-8]})", 3)
            )
            section.notes.append(
                f"B2: synthetic trace = {meta['copies']} time-shifted copies of {source.name} "
                f"({meta['events']} events, {meta['uncompressed_bytes']} bytes of JSON, "
                f"{meta['compressed_bytes']} gzipped), in {dest}"
            )
            if args.huge_mb:
                progress(f"B2: making the huge synthetic trace (≥ {args.huge_mb} MiB JSON) from {source.name}")
                dest = args.work_dir / "synthetic" / "synthetic_huge__rank0.json.gz"
                meta = make_large_trace(source, dest, args.huge_mb * 2**20)
                huge = b2_traces.TraceFile(dest, f"synthetic_huge ({meta['copies']} copies)", 2, modes=("ours",))
                huge.max_bytes = 2 * meta["uncompressed_bytes"]
                traces.append(huge)
                section.notes.append(
                    f"B2: huge synthetic trace = {meta['copies']} copies ({meta['events']} events, "
                    f"{meta['uncompressed_bytes']} bytes of JSON, {meta['compressed_bytes']} gzipped), in {dest}; "
                    "summarized by us alone (the floor and HTA would need about 12 GiB)"
                )
        else:
            section.notes.append(f"B2: no synthetic trace: its source {source} is missing")
    hta_python, hta_note = None, ""
    if "B3" in args.only:
        hta_python, hta_note = hta_env.ensure_hta(args.hta_venv or args.work_dir / "hta-venv", log=progress)
        section.notes.append(f"B3: {hta_note}" if hta_python else f"B3: HTA unavailable: {hta_note}")
        if hta_python:
            section.notes.append(
                "B3: HTA timed as Trace(trace_dir=<folder with only that file>)"
                ".parse_traces(max_ranks=1, use_multiprocessing=False, use_memory_profiling=False)"
            )
    from pytest_graphcapture.summary.tracefile import fast_parser_name

    section.notes.append(f"B2/B3: our summarize parses the trace in slices with {fast_parser_name()}")
    section.notes.append(
        "B2: each measurement in a fresh process; time = the load alone (imports excluded); peak "
        "memory = peak RSS during the load minus peak RSS before it; floor = gzip.open + json.load"
    )
    b2_traces.measure(traces, hta_python=hta_python, work_dir=args.work_dir)
    result = b2_traces.rows(traces, hta_note="" if hta_python or "B3" not in args.only else hta_note)
    if "B2" not in args.only:
        result.rows = [r for r in result.rows if r.bench != "B2"]
    section.rows += result.rows
    section.notes += result.notes
    return section


def run_b4(args: argparse.Namespace) -> Section:
    import b4_golden

    from pytest_graphcapture.engine.runner import default_batch_sizes

    sizes = default_batch_sizes(24 if args.quick else 256)
    return b4_golden.run(rounds=3 if args.quick else 30, batch_sizes=sizes, work_dir=args.work_dir)


def run_b5(args: argparse.Namespace) -> Section:
    import b5_graph_dump

    return b5_graph_dump.run(rounds=3 if args.quick else 21, work_dir=args.work_dir)


def run_b6(args: argparse.Namespace, device: str) -> Section:
    import b6_engine_loop

    sizes = (1, 2, 4) if args.quick else (1, 2, 4, 8)
    threads = args.threads or (1 if device == "cpu" else None)
    return b6_engine_loop.run(
        rounds=1 if args.quick else 15, batch_sizes=sizes, device=device, work_dir=args.work_dir, threads=threads
    )


def run_b7(args: argparse.Namespace) -> Section:
    import b7_engine_traces

    keys = args.engine_keys or (4 if args.quick else 61)
    return b7_engine_traces.run(
        keys=keys, rounds=args.engine_rounds or (1 if args.quick else 5), work_dir=args.work_dir
    )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_before = _load()
    device = _device(args.device)
    sections: list[Section] = []
    if "B1" in args.only:
        sections.append(run_b1(args, device))
    if args.only & {"B2", "B3"}:
        sections.append(run_b2_b3(args))
    if "B4" in args.only:
        sections.append(run_b4(args))
    if "B5" in args.only:
        sections.append(run_b5(args))
    if "B6" in args.only:
        sections.append(run_b6(args, device))
    if "B7" in args.only:
        sections.append(run_b7(args))
    rows: list[Row] = [row for s in sections for row in s.rows]
    notes = [note for s in sections for note in s.notes]
    notes.append(
        f"load average (1 min) at start {load_before}, at end {_load()}: other processes on the "
        "machine add noise that interleaving spreads over all variants but cannot remove"
    )
    machine = machine_description(device)
    command = "python benchmarks/run.py " + " ".join(argv)
    elapsed = time.perf_counter() - started
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    markdown = "\n".join(
        [
            f"# pytest-graphcapture benchmarks ({stamp}, {elapsed:.0f} s)",
            "",
            f"Command: `{command.strip()}`",
            "",
            "Machine:",
            "",
        ]
        + [f"- {line}" for line in machine]
        + ["", "Notes:", ""]
        + [f"- {n}" for n in notes]
        + ["", markdown_table(rows), ""]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown, encoding="utf-8")
    print()
    for line in machine + notes:
        print(line)
    missed = [r for r in rows if r.verdict == "MISSED"]
    print(
        f"\nMarkdown written to {args.out} ({elapsed:.0f} s in all); "
        f"{len(missed)} of {sum(1 for r in rows if r.target is not None)} targets missed\n"
    )
    print(text_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
