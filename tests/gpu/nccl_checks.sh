#!/bin/sh
# The NCCL runtime's process checks (tests/ranks/nccl_rank_prog.c) under dtrun, in a build dir:
#   nccl_checks.sh BUILD          on a GPU: one rank (NCCL refuses two ranks on one GPU),
#                                 more when the machine has more GPUs
#   nccl_checks.sh BUILD --sim    on cudasim: also ncclsim's own communicators of several
#                                 ranks, then collectives, async TP and meshes on 2-4 ranks and
#                                 a killed rank (ncclsim moves the data between the processes)
# Prints one line per check and ends with "N passed, N failed"; exits 1 when one failed.
build=$1
pass=0
fail=0
skip=0
check() { # name, expected exit status, text the output must hold ("" for none), command...
    name=$1 want=$2 text=$3
    shift 3
    out=$(timeout 120 "$@" 2>&1)
    rc=$?
    if [ "$rc" = 77 ]; then
        skip=$((skip + 1))
        echo "  skip $name: $(echo "$out" | tail -1)"
    elif [ "$rc" = "$want" ] && { [ -z "$text" ] || echo "$out" | grep -q "$text"; }; then
        pass=$((pass + 1))
        echo "  ok   $name"
    else
        fail=$((fail + 1))
        echo "  FAIL $name (exit $rc, want $want${text:+ and \"$text\"})"
        echo "$out" | tail -5 | sed 's/^/       /'
    fi
}
dtrun="$build/dtrun"
prog="$build/tests/ranks/nccl_rank_prog"
check "nccl collectives, 1 rank" 0 "" "$dtrun" -n 1 "$prog" collectives
check "nccl mesh communicators, 1 rank" 0 "" "$dtrun" -n 1 "$prog" mesh
check "nccl async tp collective matmuls, 1 rank" 0 "" "$dtrun" -n 1 "$prog" async_tp
# DT_DEBUG_COLLECTIVES: the fingerprint exchange runs through NCCL before each collective
check "nccl collectives, DT_DEBUG_COLLECTIVES=1, 1 rank" 0 "" env DT_DEBUG_COLLECTIVES=1 "$dtrun" -n 1 "$prog" collectives
if [ "$2" = "--sim" ]; then
    # a rank that never arrives fails in 30 s, within check's 120
    export NCCLSIM_TIMEOUT_S=30
    check "ncclsim communicators of 2-4 forked ranks against naive loops" 0 "" \
        "$build/tests/gpu/ncclsim_ranks"
    for n in 2 3 4; do
        check "nccl collectives, $n ranks (sim)" 0 "" "$dtrun" -n $n "$prog" collectives
        check "nccl async tp collective matmuls, $n ranks (sim)" 0 "" "$dtrun" -n $n "$prog" async_tp
    done
    check "nccl mesh communicators, 4 ranks (sim)" 0 "" "$dtrun" -n 4 "$prog" mesh
    check "nccl: DT_DEBUG_COLLECTIVES names different collectives (sim)" 3 "ranks called different collectives: rank 0 is in all_reduce #2" env DT_DEBUG_COLLECTIVES=1 DT_TIMEOUT_S=20 "$dtrun" -n 3 "$prog" wrong-collective
    check "nccl: a sleeping peer is waited for (sim)" 0 "" env DT_TIMEOUT_S=60 DT_CHECK_S=0.5 DT_TEST_SLEEP_S=2 "$dtrun" -n 4 "$prog" slow-peer
    check "nccl: a killed rank aborts the others (sim)" 137 "failed cleanly after .* s: DT_ERR_ABORTED" env DT_TIMEOUT_S=20 "$dtrun" -n 3 "$prog" fault
else
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$gpus" -ge 2 ]; then
        check "nccl collectives, $gpus ranks" 0 "" "$dtrun" -n "$gpus" "$prog" collectives
        check "nccl async tp collective matmuls, $gpus ranks" 0 "" "$dtrun" -n "$gpus" "$prog" async_tp
        check "nccl: a killed rank aborts the others" 137 "failed cleanly after .* s: DT_ERR_ABORTED" env DT_TIMEOUT_S=20 "$dtrun" -n "$gpus" "$prog" fault
        check "nccl: DT_DEBUG_COLLECTIVES names different collectives" 3 "ranks called different collectives: rank 0 is in all_reduce #2" env DT_DEBUG_COLLECTIVES=1 DT_TIMEOUT_S=20 "$dtrun" -n "$gpus" "$prog" wrong-collective
    fi
    # Ranks stuck across groups (the watchdog posts to rank 0's board): 4 ranks as dp=2 x tp=2.
    # diverge not on cudasim: there a collective's wait runs inside the call that queues it
    # (cudasim runs a stream's work when it is waited for), holding the runtime's NCCL lock, so
    # the watchdog cannot post the stuck rank before ncclsim's own bound (NCCLSIM_TIMEOUT_S)
    # ends the wait, unnamed.
    if [ "$gpus" -ge 4 ]; then
        check "nccl: ranks stuck across groups name the diverging rank" 3 "root cause: rank 0 exited with status 3: DT_ERR_COMM: rank 0 diverged" env DT_TIMEOUT_S=60 DT_CHECK_S=1 "$dtrun" -n 4 "$prog" diverge
        check "nccl: a sleeping peer is waited for" 0 "" env DT_TIMEOUT_S=60 DT_CHECK_S=0.5 DT_TEST_SLEEP_S=2 "$dtrun" -n 4 "$prog" slow-peer
    fi
fi
[ "$skip" = 0 ] || echo "($skip skipped: no GPU, or a build without NCCL)"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
