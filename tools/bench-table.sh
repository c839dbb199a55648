#!/bin/sh
# make bench: runs every benchmark this build has and prints one table (case, figure, the
# reference measured in the same run, ratio).
build=${1:-build}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for b in "$build"/bench/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    "$b" --table >> "$rows" || echo "$(basename "$b")	failed	-	-" >> "$rows"
done
{ printf 'case\tfigure\treference (same run)\tratio\n'; cat "$rows"; } | column -t -s "$(printf '\t')"
