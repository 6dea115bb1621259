#!/usr/bin/env bash
# Everything a GPU machine should tell us, in one call of at most 9.5 minutes:
#
#   scripts/gpu_check.sh [--out DIR] [--dry-run [--examples-python PY] [--examples-opt ARG]...]
#
# 1. the gpu-marked tests;
# 2. the examples with real graphs, --graph-capture-trace and --golden-out (the platform's goldens,
#    harvested under DIR/goldens/<platform>/, to commit under examples/goldens/);
# 3. the profiler probe (scripts/gpu_probe.py probe): captured-only kernel events, correlation ids,
#    graph node ids, memsets, streams, a second profiler session -> DIR/probe.json;
# 4. capture timings with profiling off / summary-only / per-bs export (median of 3), their ratios and
#    the per-key metrics (warmup/capture/replay time, graph memory) -> DIR/timings.json;
# 5. whether the harvested (live) summaries agree with the per-bs trace files -> DIR/agree.json;
# 6. the graph readout (scripts/gpu_probe.py graph): per example key, the graph read in process vs the
#    profiled replay (equal kernel multisets), the share of kernels named with their op, the readout's
#    time per key -> DIR/graph.json (needs cuda-bindings: pip install 'pytest-graphcapture[cuda]');
# 7. the engine-loop gate's observation (scripts/gpu_engine_probe.py hooks): torch's global capture hooks
#    on torch >= 2.15 (nothing patched), else capture_begin/_end patched; torch.cuda as it was after; each
#    key's kernel_source (graph-data / graph / replay) -> DIR/hooks.json;
# 8. the one-CUPTI-client refusal (scripts/gpu_engine_probe.py cupti): CUDA_INJECTION64_PATH set after CUDA
#    is up refuses a runner and an engine-loop capture in one line; a capture with torch's cupti annotation
#    backend ends without a result -> DIR/cupti.json;
# 9. graphs inside the forward (scripts/gpu_engine_probe.py pieces): an engine whose forward captures three
#    piece graphs per batch size, eager ops between them, gated by the engine loop: three graphs per key,
#    each with its ops (and on a GPU its kernels); torch.cuda as it was after -> DIR/pieces.json;
# 10. a torch.compile(mode="reduce-overhead") model (scripts/gpu_engine_probe.py compiled): its loop, one
#    warmup call per size then the call inductor records the size's graph in, gated with warmups=1: refused
#    or not, keys, graphs per key, kernels and kernel_source (on CPU: refused, no graph) -> DIR/compiled.json;
# 11. memset forms (scripts/gpu_probe.py memset): a graph with memsets, one replay profiled by Kineto and, on
#    torch >= 2.15, by its Cuspy backend (CUPTI HES), each in a fresh process: the memset records each shows,
#    the summaries (DIR/memset-kineto.json, DIR/memset-cuspy.json) and whether they agree -> DIR/memset.json;
# 12. get_graph_data ports (scripts/gpu_probe.py ports): the installed cuda-bindings, whether its edge data is
#    trusted (13.3.0+), the readout's kernel_source, and there torch's edges with their ports -> DIR/ports.json;
# then the 3 smallest per-bs traces of the examples are copied to DIR/traces/.
# DIR/summary.md lists each step, its exit code and the torch/CUDA/driver versions.
#
# --dry-run runs the same steps on CPU (small sizes, one repetition) to check this script's plumbing;
# CI runs it (tests/e2e/test_gpu_check.py). Without --dry-run, a machine without a GPU is refused.
# With --dry-run only: --examples-python PY runs the examples step in PY instead of $PYTHON, and
# --examples-opt ARG (repeatable) adds ARG to its pytest (the suite runs the README's examples job,
# -Werror in a fresh interpreter, as this step: tests/e2e/conftest.py).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/gpu_check_out"
dry=0
examples_python=""
examples_opts=()
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --out=*) out="${1#--out=}"; shift ;;
        --dry-run) dry=1; shift ;;
        --examples-python) examples_python="$2"; shift 2 ;;
        --examples-opt) examples_opts+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,41p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
python="${PYTHON:-python}"
if [ $dry = 0 ] && { [ -n "$examples_python" ] || [ ${#examples_opts[@]} -gt 0 ]; }; then
    echo "gpu_check.sh: --examples-python and --examples-opt go with --dry-run only" >&2
    exit 2
fi
examples_python="${examples_python:-$python}"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
if [ $dry = 1 ]; then
    device=cpu; repeat=1; sizes=1,2; step_limit=420; short_limit=420
else
    # 7 steps x 60 s + 5 short ones x 30 s = 9.5 minutes
    device=cuda; repeat=3; sizes=1,2,4,8,16,32; step_limit=60; short_limit=30
    if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        echo "gpu_check.sh: torch sees no GPU here; run it on a GPU machine, or pass --dry-run" >&2
        exit 2
    fi
fi
summary="$out/summary.md"
status=0
{
    echo "# GPU check ($([ $dry = 1 ] && echo 'dry run on CPU' || echo 'GPU run'))"
    echo
    "$python" -c 'import json, torch; from pytest_graphcapture.engine.backend import detect_platform, environment_from_device; d = "cuda" if torch.cuda.is_available() else "cpu"; print("platform:", detect_platform(d)); print("environment:", json.dumps(environment_from_device(d), sort_keys=True))'
    echo
    echo "| step | exit code | seconds |"
    echo "|---|---:|---:|"
} >"$summary"

step() {  # step NAME COMMAND...: run one step under its time limit, log it, record its exit code
    local name="$1"; shift
    local limit=$step_limit
    case "$name" in hooks|cupti|pieces|compiled|ports) limit=$short_limit ;; esac
    local informational=0
    if [ "$name" = examples ] && [ $dry = 0 ]; then informational=1; fi
    local started=$SECONDS
    echo "== $name"
    (cd "$repo" && timeout "$limit" "$@") >"$out/$name.log" 2>&1
    local rc=$?
    echo "| $name | $rc | $((SECONDS - started)) |" >>"$summary"
    tail -3 "$out/$name.log"
    if [ $rc -ne 0 ] && [ $informational = 0 ]; then status=1; fi
}

# -n0: the gpu tests run one after another on the one GPU, and the suite is collected once, not once per core.
step gpu-tests "$python" -m pytest -q -p no:cacheprovider -n0 -m gpu tests
# On a GPU without goldens for its platform yet the examples fail "missing golden" (informational there):
# the harvest under DIR/goldens is the point. Their own batch sizes: the goldens depend on them.
step examples "$examples_python" -m pytest -q -p no:cacheprovider examples ${examples_opts[@]+"${examples_opts[@]}"} \
    --graph-capture-device="$device" --graph-capture-trace --graph-capture-dir="$out/examples" \
    --golden-out="$out/goldens" --graph-capture-report="$out/examples-report.md"
step probe "$python" scripts/gpu_probe.py probe "$out/probe.json" --device "$device"
step timings "$python" scripts/gpu_probe.py timings "$out/timings.json" --device "$device" \
    --repeat "$repeat" --batch-sizes "$sizes"
step agree "$python" scripts/gpu_probe.py agree "$out/agree.json" --device "$device" --goldens "$out/goldens" \
    --traces "$out/examples/graph_capture_profile"
step graph "$python" scripts/gpu_probe.py graph "$out/graph.json" --device "$device" --batch-sizes "$sizes"
step hooks "$python" scripts/gpu_engine_probe.py hooks "$out/hooks.json" --device "$device"
step cupti "$python" scripts/gpu_engine_probe.py cupti "$out/cupti.json" --device "$device"
step pieces "$python" scripts/gpu_engine_probe.py pieces "$out/pieces.json" --device "$device"
step compiled "$python" scripts/gpu_engine_probe.py compiled "$out/compiled.json" --device "$device"
step memset "$python" scripts/gpu_probe.py memset "$out/memset.json" --device "$device"
step ports "$python" scripts/gpu_probe.py ports "$out/ports.json" --device "$device"

# Each test's traces are in its own folder (two tests may capture runners of the same name): the
# copies keep that folder, relative to the trace dir.
mkdir -p "$out/traces"
find "$out/examples/graph_capture_profile" -name '*_bs_*.json.gz' -printf '%s %P\n' 2>/dev/null \
    | sort -n | head -3 | cut -d' ' -f2- | while read -r trace; do
        mkdir -p "$out/traces/$(dirname "$trace")"
        cp "$out/examples/graph_capture_profile/$trace" "$out/traces/$trace"
    done
{
    echo
    echo "harvested goldens: $(find "$out/goldens" -name '*.json' 2>/dev/null | wc -l) under goldens/"
    echo "traces copied: $(find "$out/traces" -name '*.json.gz' | wc -l) under traces/"
} >>"$summary"
cat "$summary"
exit $status
