#!/bin/sh
# make bench: runs every benchmark this build has, prints one table (case, figure, the
# reference measured in the same run, ratio) and the local collectives' sweep (nccl-tests
# columns), and writes both with bandwidth-vs-size plots to $build/bench/bench.html.
# BENCH_QUICK=1 (make bench QUICK=1): shorter sweeps (x16 sizes up to 16 MiB, local and UCX)
# and a shorter bench_growth and bench_ucx_redistribute (they read BENCH_QUICK themselves).
# The UCX sweep (bench_ucx: 2, 4, 8 processes next to the local runtime and ucx_perftest) and
# UCX redistribute (growth, and PyTorch DTensor on gloo when DT_TORCH_PYTHON is set) print as
# sections of their own and add their rows to the table; DT_BENCH_UCX_ENVS picks the
# environments the UCX side runs under (bench/bench_ucx_util.h).
build=${1:-build}
export DT_BENCH_OUT="$build/bench" # where benchmarks write their traces
rows=$(mktemp)
sweep=$(mktemp)
growth=$(mktemp)
ucxsweep=$(mktemp)
ucxredist=$(mktemp)
trap 'rm -f "$rows" "$sweep" "$growth" "$ucxsweep" "$ucxredist"' EXIT
quick=$([ -n "$BENCH_QUICK" ] && echo --quick)
machine="$(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load average $(cut -d' ' -f1-3 /proc/loadavg) at start, $(date -u '+%Y-%m-%d %H:%M UTC')"
for b in "$build"/bench/bench_*; do
    [ -f "$b" ] && [ -x "$b" ] || continue
    case "$(basename "$b")" in
    bench_html) continue ;;
    bench_collectives) # the sweep: its own section
        # shellcheck disable=SC2086
        "$b" --tsv $quick > "$sweep" ||
            echo "bench_collectives	failed	-	-" >> "$rows"
        continue ;;
    bench_growth) # planner and redistribute time vs size and ranks: its own section
        "$b" > "$growth" || echo "bench_growth	failed	-	-" >> "$rows"
        continue ;;
    bench_ucx) # the UCX sweep: its own section, its 16 MiB rows into the table
        # shellcheck disable=SC2086
        "$b" --tsv --rows "$rows" $quick > "$ucxsweep" ||
            echo "bench_ucx	failed	-	-" >> "$rows"
        continue ;;
    bench_ucx_redistribute) # growth and PyTorch: its own section, PyTorch rows into the table
        "$b" --rows "$rows" > "$ucxredist" ||
            echo "bench_ucx_redistribute	failed	-	-" >> "$rows"
        continue ;;
    esac
    "$b" --table >> "$rows" || echo "$(basename "$b")	failed	-	-" >> "$rows"
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
if [ -s "$ucxsweep" ]; then
    echo
    echo "UCX collectives (bench_ucx; median of 15 interleaved rounds; x_local = UCX time / local runtime time, p2p = ucx_perftest tag_bw, same rounds):"
    column -t -s "$(printf '\t')" < "$ucxsweep"
fi
if [ -s "$ucxredist" ]; then
    echo
    echo "UCX redistribute (bench_ucx_redistribute):"
    cat "$ucxredist"
fi
if [ -x "$build/bench/bench_html" ]; then
    # shellcheck disable=SC2046
    "$build/bench/bench_html" "$rows" "$sweep" "$machine" $([ -s "$ucxsweep" ] && echo "$ucxsweep") > "$build/bench/bench.html" &&
        echo "wrote $build/bench/bench.html"
fi
