#!/usr/bin/env bash
# Run the test suite and the main job on each given torch release, each in its own venv outside the repo.
#
#   scripts/compat.sh [--root DIR] [--jobs N] [--index-url URL] [--keep] [--main-job-only] VERSION...
#                                                                   e.g. scripts/compat.sh 2.9.1 2.15.0
#   scripts/compat.sh [--root DIR] --table                                          the table of the results so far
#
# The committed tree (HEAD) is exported to DIR/src-COMMIT first, so edits made while the (long) runs go
# on cannot change what is tested; the real traces are read in place (GRAPH_CAPTURE_REAL_TRACES).
# For each VERSION: a venv DIR/torch-VERSION (default DIR: /work/compat), torch (from --index-url when
# given, e.g. https://download.pytorch.org/whl/cpu for the small CPU builds) pinned to exactly VERSION
# by a constraints file for every pip call (so installing the project can never swap the tested torch,
# and a VERSION outside pyproject's bound fails the install instead of silently testing another one),
# then the main job (README) and the whole test suite (not with --main-job-only: minutes instead of the
# suite's quarter hour or more on a loaded machine; the row then says the suite was not run). The torch
# build, the closing pytest lines, the exit codes and which profiler capabilities the build has
# (pytest_graphcapture/summary/platform.py) go to DIR/results/VERSION.txt, the full log beside it;
# DIR/results/table.md is rewritten with one row per results file, the rows of docs/compatibility.md.
# The venv (several GB for the CUDA wheels) is removed once its row is written, unless --keep. Exit 0 when every VERSION passed both.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root=/work/compat
jobs=0
keep=0
main_job_only=0
index=()
table_only=0
versions=()
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --index-url) index=(--index-url "$2"); shift 2 ;;
        --keep) keep=1; shift ;;
        --main-job-only) main_job_only=1; shift ;;
        --table) table_only=1; shift ;;
        -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) echo "compat.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) versions+=("$1"); shift ;;
    esac
done
if [ ${#versions[@]} -eq 0 ] && [ $table_only -eq 0 ]; then
    echo "compat.sh: name at least one torch version, e.g. scripts/compat.sh 2.9.1 2.15.0" >&2
    exit 2
fi
case "$root" in
    "$repo"|"$repo"/*) echo "compat.sh: --root $root lies inside the repository; use a folder outside it" >&2; exit 2 ;;
esac
mkdir -p "$root/results"

field() {  # the value of "NAME: value" in a results file
    sed -n "s/^$1: //p" "$2" | head -1
}

write_table() {  # one Markdown row per results file, newest torch first
    local out="$root/results/table.md" file
    {
        echo "| torch | build | test suite | main job | commit |"
        echo "|---|---|---|---|---|"
        for file in $(ls "$root"/results/*.txt 2>/dev/null | sort -V -r); do
            printf '| %s | %s | %s | %s | `%s` |\n' "$(field version "$file")" "$(field build "$file")" \
                "$(field tests "$file")" "$(field main-job "$file")" "$(field commit "$file")"
        done
    } >"$out.tmp" && mv "$out.tmp" "$out"
}

if [ $table_only -eq 1 ]; then
    write_table
    cat "$root/results/table.md"
    exit 0
fi

if ! commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null)"; then
    echo "compat.sh: $repo is not a git checkout; it runs the committed tree (git archive HEAD), so run it from a clone" >&2
    exit 2
fi
src="$root/src-$commit"
if [ ! -d "$src" ]; then
    mkdir -p "$src.tmp" && git -C "$repo" archive HEAD | tar -x -C "$src.tmp" && mv "$src.tmp" "$src" || exit 2
fi
export GRAPH_CAPTURE_REAL_TRACES="${GRAPH_CAPTURE_REAL_TRACES:-$repo/../shared/testdata/real_traces}"

closing_line() {  # pytest's closing line ("3 failed, 456 passed, 1 skipped in 12.3s"), the last in the log
    grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error|errors|deselected)[^=]* in [0-9.]+s' "$1" | tail -1 \
        | sed 's/=//g; s/^ *//; s/ *$//'
}

result() {  # "10 passed in 41.2s" for exit 0, "FAILED: 3 failed, 7 passed in 40.1s (exit 1)" otherwise
    local line="${2:-no closing line}"
    if [ "$1" -eq 0 ]; then echo "$line"; else echo "FAILED: $line (exit $1)"; fi
}

status=0
for version in "${versions[@]}"; do
    venv="$root/torch-$version"
    log="$root/results/$version.log"
    out="$root/results/$version.txt"
    pin="$root/results/$version.constraints"
    echo "== torch $version: venv $venv, log $log"
    printf 'torch==%s\n' "$version" >"$pin"
    {
        [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
        PIP_CONSTRAINT="$pin" "$venv/bin/pip" install -q --no-cache-dir "${index[@]}" "torch==$version" \
            && PIP_CONSTRAINT="$pin" "$venv/bin/pip" install -q --no-cache-dir numpy -e "$src[test]"
    } >"$log" 2>&1
    install_rc=$?
    if [ $install_rc -ne 0 ]; then
        printf 'version: %s\nbuild: -\ntests: install failed (exit %s), see %s\nmain-job: not run\ncommit: %s\n' \
            "$version" "$install_rc" "$log" "$commit" | tee "$out"
        tail -5 "$log"
        status=1
        [ $keep -eq 1 ] || rm -rf "$venv"
        write_table
        continue
    fi
    examples_dir="$(mktemp -d)"
    (cd "$src" && env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider examples \
        --graph-capture-trace --graph-capture-dir="$examples_dir") >>"$log" 2>&1
    examples_rc=$?
    rm -rf "$examples_dir"
    examples_line="$(closing_line "$log")"
    if [ $main_job_only -eq 1 ]; then
        tests="not run (--main-job-only)"
        tests_rc=0
    else
        xdist=()
        [ "$jobs" != 0 ] && xdist=(-n "$jobs")
        (cd "$src" && env -u PYTHONPATH "$venv/bin/python" -m pytest -q -p no:cacheprovider "${xdist[@]}") >>"$log" 2>&1
        tests_rc=$?
        tests="$(result "$tests_rc" "$(closing_line "$log")")"
    fi
    build="$(env -u PYTHONPATH "$venv/bin/python" -c 'import platform, torch
cuda = torch.version.cuda
kind = f"CUDA {cuda} build, run on CPU" if cuda else "CPU build"
print(f"`{torch.__version__}` ({kind}, Python {platform.python_version()})")')"
    caps="$(cd "$src" && env -u PYTHONPATH "$venv/bin/python" -c 'import torch
from torch.autograd import _KinetoEvent
from pytest_graphcapture.summary.platform import event_caps, graph_hooks, has_driver_version
caps = event_caps(_KinetoEvent)
print(f"activity_type {caps.activity_type}, structured_input_shapes {caps.structured_input_shapes}, "
      f"metadata_json {caps.metadata_json}, driver_version {has_driver_version(torch)}, "
      f"graph_hooks {graph_hooks(torch) is not None}")' 2>>"$log")"
    {
        echo "version: $version"
        echo "build: $build"
        echo "tests: $tests"
        echo "main-job: $(result "$examples_rc" "$examples_line")"
        echo "commit: $commit"
        echo "caps: ${caps:-not probed, see the log}"
    } | tee "$out"
    [ $tests_rc -eq 0 ] && [ $examples_rc -eq 0 ] || status=1
    [ $keep -eq 1 ] || rm -rf "$venv"
    write_table
done
exit $status
