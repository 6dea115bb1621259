#!/usr/bin/env bash
# Run this repository's test suite on each given torch release, each in its own venv outside the repo.
#
#   scripts/compat.sh [--root DIR] [--jobs N] VERSION...      e.g. scripts/compat.sh 2.14.1 2.4.0
#
# For each VERSION: a venv DIR/torch-VERSION (default DIR: /work/compat), `pip install torch==VERSION
# numpy` first (torch is unpinned in pyproject, so the build installed first is the one tested), then
# this repository with [test], then `pytest` and the examples' main job. The closing pytest lines, the
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

status=0
for version in "${versions[@]}"; do
    venv="$root/torch-$version"
    log="$root/results/$version.log"
    out="$root/results/$version.txt"
    echo "== torch $version: venv $venv, log $log"
    {
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
        "$venv/bin/pip" install -q "torch==$version" numpy \
            && "$venv/bin/pip" install -q -e "$repo[test]"
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
    (cd "$repo" && env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider "${xdist[@]}") >>"$log" 2>&1
    tests_rc=$?
    tests_line="$(grep -E '^=*.* (passed|failed|error)' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
    examples_dir="$(mktemp -d)"
    (cd "$repo" && env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider examples \
        --graph-capture-trace --graph-capture-dir="$examples_dir") >>"$log" 2>&1
    examples_rc=$?
    rm -rf "$examples_dir"
    examples_line="$(grep -E '^=*.* (passed|failed|error)' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')"
    versions_line="$(env -u PYTHONPATH "$venv/bin/python" -c 'import platform, torch; print(f"torch {torch.__version__} (CUDA build {torch.version.cuda}, HIP {torch.version.hip}), python {platform.python_version()}")')"
    {
        echo "$versions_line"
        echo "tests: $tests_line (exit $tests_rc)"
        echo "examples: $examples_line (exit $examples_rc)"
        echo "commit: $(git -C "$repo" rev-parse --short HEAD)"
    } | tee "$out"
    [ $tests_rc -eq 0 ] && [ $examples_rc -eq 0 ] || status=1
done
exit $status
