#!/bin/sh
# make gpu-check: on a machine with an NVIDIA GPU, nvcc, meson and ninja (no Debian packages:
# no Criterion, UCX or OpenBLAS needed), builds with CUDA, checks every op and redistribution
# on ranks of one GPU against the CPU (tests/gpu/gpu_check.c), runs the GPU benchmarks, and ends
# with the line "N passed, N failed". Without a GPU it says so and exits 77.
# DT_GPU_CHECK_SIM=1 runs the same against cudasim (no GPU, no nvcc; benchmarks skipped): a
# check of this script and of the checks themselves.
build=${1:-build-gpu}
sim=${DT_GPU_CHECK_SIM:-0}
if [ "$sim" = 1 ]; then
    build=$build-sim
elif ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU here (nvidia-smi lists none): skipped"
    exit 77
fi
command -v nvcc >/dev/null 2>&1 || PATH=$PATH:/usr/local/cuda/bin
[ "$sim" = 1 ] || command -v nvcc >/dev/null 2>&1 || { echo "gpu-check: nvcc not found" >&2; exit 1; }
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log" "$log.nccl" "$log.ckpt"' EXIT
if [ ! -f "$build/build.ninja" ]; then
    if [ "$sim" = 1 ]; then gpu="-Dgpu_sim=true"; else gpu="-Dcuda=enabled"; fi
    meson setup "$build" $gpu -Dtests=false -Ducx=disabled -Dopenblas=disabled \
        -Dbuildtype=release >/dev/null || { echo "gpu-check: meson setup failed" >&2; exit 1; }
fi
ninja -C "$build" >/dev/null || { ninja -C "$build" | tail -40; echo "gpu-check: build failed" >&2; exit 1; }
echo "gpu-check: built in $(($(date +%s) - start)) s"
# Bounded, so that a hang still leaves the sections that ran and a verdict.
timeout 300 "$build/tests/gpu/gpu_check" | tee "$log"
echo "checkpoints of device tensors:"
if [ -x "$build/tests/gpu/ckpt_gpu_check" ]; then
    timeout 120 "$build/tests/gpu/ckpt_gpu_check" | tee "$log.ckpt"
else
    echo "  (not in this build: no libxxhash)"; echo "0 passed, 0 failed" > "$log.ckpt"
fi
echo "nccl runtime (processes under dtrun):"
if [ "$sim" = 1 ]; then nccl_mode=--sim; else nccl_mode=; fi
sh tests/gpu/nccl_checks.sh "$build" $nccl_mode | tee "$log.nccl"
echo
echo "benchmarks:"
if [ "$sim" = 1 ]; then echo "  (not on cudasim)"; else "$build/bench/bench_gpu" || echo "  bench_gpu failed"; fi
echo
echo "gpu-check: $(($(date +%s) - start)) s in all"
grep -E '^(memory/async|ops|redistribute|mlp):' "$log"
echo "nccl:         $(tail -n 1 "$log.nccl")"
echo "checkpoint:   $(tail -n 1 "$log.ckpt")"
# The verdict: the three programs' last lines ("N passed, N failed"), added up.
tail -q -n 1 "$log" "$log.nccl" "$log.ckpt" | awk '
    /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3; n++ }
    END { if (n < 3) f++; printf "%d passed, %d failed\n", p, f; exit f > 0 }'

