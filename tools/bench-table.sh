#!/bin/sh
# make bench: runs every benchmark this build has, prints one table (case, figure, the
# reference measured in the same run, ratio) and the local collectives' sweep (nccl-tests
# columns), and writes both with bandwidth-vs-size plots to $build/bench/bench.html.
# BENCH_QUICK=1 (make bench QUICK=1): a shorter sweep (x16 sizes up to 16 MiB), a shorter
# bench_growth (it reads BENCH_QUICK itself) and no UCX runs.
build=${1:-build}
export DT_BENCH_OUT="$build/bench" # where benchmarks write their traces
rows=$(mktemp)
sweep=$(mktemp)
growth=$(mktemp)
trap 'rm -f "$rows" "$sweep" "$growth"' EXIT
machine="$(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg) at start, $(date -u '+%Y-%m-%d %H:%M UTC')"
for b in "$build"/bench/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    case "$(basename "$b")" in
    bench_html) continue ;;
    bench_collectives) # the sweep: its own section
        # shellcheck disable=SC2046
        "$b" --tsv $([ -n "$BENCH_QUICK" ] && echo --quick) > "$sweep" ||
            echo "bench_collectives	failed	-	-" >> "$rows"
        continue ;;
    bench_growth) # planner and redistribute time vs size and ranks: its own section
        "$b" > "$growth" || echo "bench_growth	failed	-	-" >> "$rows"
        continue ;;
    bench_ucx) [ -n "$BENCH_QUICK" ] && continue
        runs="-n 2|-n 4" ;; # 2 processes: one per core; 4: oversubscribed
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
sed -i '1i case\tfigure\treference (same run)\tratio' "$rows"
echo "$machine"
column -t -s "$(printf '\t')" < "$rows"
if [ -s "$sweep" ]; then
    echo
    echo "local collectives (median of 15 interleaved rounds; mem_pct = copy of the same bytes / time):"
    column -t -s "$(printf '\t')" < "$sweep"
fi
if [ -s "$growth" ]; then
    echo
    echo "cost growth (bench_growth):"
    cat "$growth"
fi
if [ -x "$build/bench/bench_html" ]; then
    "$build/bench/bench_html" "$rows" "$sweep" "$machine" > "$build/bench/bench.html" &&
        echo "wrote $build/bench/bench.html"
fi
