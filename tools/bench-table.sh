#!/bin/sh
# make bench: runs every benchmark this build has and prints one table (case, figure, the
# reference measured in the same run, ratio).
build=${1:-build}
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for b in "$build"/bench/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    case "$(basename "$b")" in
    bench_ucx) runs="-n 2|-n 4" ;; # 2 processes: one per core; 4: oversubscribed
    *) runs="" ;;
    esac
    if [ -z "$runs" ]; then
        "$b" --table >> "$rows" || echo "$(basename "$b")	failed	-	-" >> "$rows"
        continue
    fi
    echo "$runs" | tr '|' '\n' | while read -r args; do
        # shellcheck disable=SC2086
        "$b" --table $args >> "$rows" || echo "$(basename "$b") $args	failed	-	-" >> "$rows"
    done
done
{ printf 'case\tfigure\treference (same run)\tratio\n'; cat "$rows"; } | column -t -s "$(printf '\t')"
