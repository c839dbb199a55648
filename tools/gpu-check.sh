#!/bin/sh
# make gpu-check: on a machine with an NVIDIA GPU, nvcc, meson and ninja (no Debian packages:
# no Criterion, UCX or OpenBLAS needed), builds with CUDA, checks every op and redistribution
# on ranks of one GPU against the CPU (tests/gpu_check.c), runs the GPU benchmarks, and ends
# with the line "N passed, N failed". Without a GPU it says so and exits 77.
build=${1:-build-gpu}
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi lists none): skipped"
    exit 77
fi
command -v nvcc >/dev/null 2>&1 || PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null 2>&1 || { echo "gpu-check: nvcc not found" >&2; exit 1; }
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dcuda=enabled -Dtests=false -Ducx=disabled -Dopenblas=disabled \
        -Dbuildtype=release >/dev/null || { echo "gpu-check: meson setup failed" >&2; exit 1; }
fi
ninja -C "$build" >/dev/null || { ninja -C "$build" | tail -40; echo "gpu-check: build failed" >&2; exit 1; }
echo "gpu-check: built in $(($(date +%s) - start)) s"
"$build/tests/gpu_check" | tee "$log"
# gpu_check's last line is its verdict (tee hides its exit status)
rc=1
tail -n 1 "$log" | grep -qE '^[0-9]+ passed, 0 failed$' && rc=0
echo
echo "benchmarks:"
"$build/bench/bench_gpu" || echo "  bench_gpu failed"
echo
echo "gpu-check: $(($(date +%s) - start)) s in all"
grep -E '^(memory|ops|redistribute|mlp):' "$log"
tail -n 1 "$log" | grep -E '^[0-9]+ passed, [0-9]+ failed$' || echo "0 passed, 1 failed"
exit $rc
