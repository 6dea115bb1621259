#!/usr/bin/env bash
# Run this repository's test suite on each given torch release, each in its own venv outside the repo.
#
#   scripts/compat.sh [--root DIR] [--jobs N] VERSION...      e.g. scripts/compat.sh 2.14.1 2.4.0
#
# The committed tree (HEAD) is exported to DIR/src-COMMIT first, so edits made while the (long) runs go
# on cannot change what is tested; the real traces are read in place (GRAPH_CAPTURE_REAL_TRACES).
# For each VERSION: a venv DIR/torch-VERSION (default DIR: /work/compat), `pip install torch==VERSION
# numpy` first (torch is unpinned in pyproject, so the build installed first is the one tested), then
# that tree with [test], then `pytest` and the examples' main job. The closing pytest lines, the
# torch/CUDA/python versions and the exit codes go to DIR/results/VERSION.txt and to stdout, the full
# logs beside them; docs/compatibility.md is written from those files.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root=/work/compat
jobs=0
versions=()
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) echo "compat.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) versions+=("$1"); shift ;;
    esac
done
if [ ${#versions[@]} -eq 0 ]; then
    echo "compat.sh: name at least one torch version, e.g. scripts/compat.sh 2.14.1 2.4.0" >&2
    exit 2
fi
case "$root" in
    "$repo"|"$repo"/*) echo "compat.sh: --root $root lies inside the repository; use a folder outside it" >&2; exit 2 ;;
esac
mkdir -p "$root/results"
commit="$(git -C "$repo" rev-parse --short HEAD)"
src="$root/src-$commit"
if [ ! -d "$src" ]; then
    mkdir -p "$src.tmp" && git -C "$repo" archive HEAD | tar -x -C "$src.tmp" && mv "$src.tmp" "$src" || exit 2
fi
export GRAPH_CAPTURE_REAL_TRACES="${GRAPH_CAPTURE_REAL_TRACES:-$repo/../shared/testdata/real_traces}"

closing_line() {  # pytest's closing line ("3 failed, 456 passed, 1 skipped in 12.3s"), the last in the log
    grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error|errors|deselected)[^=]* in [0-9.]+s' "$1" | tail -1 \
        | sed 's/=//g; s/^ *//; s/ *$//'
}

status=0
for version in "${versions[@]}"; do
    venv="$root/torch-$version"
    log="$root/results/$version.log"
    out="$root/results/$version.txt"
    echo "== torch $version: venv $venv, log $log"
    {
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
        "$venv/bin/pip" install -q "torch==$version" numpy \
            && "$venv/bin/pip" install -q -e "$src[test]"
    } >"$log" 2>&1
    install_rc=$?
    if [ $install_rc -ne 0 ]; then
        printf 'torch %s\ninstall: FAILED (exit %s), see %s\n' "$version" "$install_rc" "$log" | tee "$out"
        tail -5 "$log"
        status=1
        continue
    fi
    xdist=()
    [ "$jobs" != 0 ] && xdist=(-n "$jobs")
    (cd "$src" && env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider "${xdist[@]}") >>"$log" 2>&1
    tests_rc=$?
    tests_line="$(closing_line "$log")"
    examples_dir="$(mktemp -d)"
    (cd "$src" && env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider examples \
        --graph-capture-trace --graph-capture-dir="$examples_dir") >>"$log" 2>&1
    examples_rc=$?
    rm -rf "$examples_dir"
    examples_line="$(closing_line "$log")"
    versions_line="$(env -u PYTHONPATH "$venv/bin/python" -c 'import platform, torch; print(f"torch {torch.__version__} (CUDA build {torch.version.cuda}, HIP {torch.version.hip}), python {platform.python_version()}")')"
    {
        echo "$versions_line"
        echo "tests: $tests_line (exit $tests_rc)"
        echo "examples: $examples_line (exit $examples_rc)"
        echo "commit: $commit"
    } | tee "$out"
    [ $tests_rc -eq 0 ] && [ $examples_rc -eq 0 ] || status=1
done
exit $status
