#!/bin/sh
# Two hosts on one machine: two Linux network namespaces joined by a veth pair (10.77.0.1 and
# 10.77.0.2), each rank in its host's namespace and in a UTS namespace of its own with the
# host's name, so the runtime's host ids differ (hostname + boot id) and the ranks meet over
# the veth pair: rank 0 listens for the rendezvous on host A's address, ranks of one host talk
# over shared memory and ranks of different hosts over TCP (checked from UCX's own report of
# its endpoints' transports). Runs over UCX, 2 hosts x 2 ranks unless said:
#   collectives (every collective on the world and subgroups; the world's all_reduce must run
#   hierarchically, one-host and one-per-host groups flat), the same on 2 x 1 ranks and with
#   DT_UCX_HIER=0 (flat everywhere), the example model's training (every step's loss equal to
#   the local runtime's on 4 in-process ranks within 1e-5 relative), a checkpoint saved on
#   2 x 2 and loaded on 2 + 1 ranks, and a rank of host B killed mid all_reduce (the others
#   fail cleanly, naming it).
# Usage: test_two_hosts.sh DTRUN UCX_RANK_PROG TRAIN CKPT_RANK_PROG
#        test_two_hosts.sh --run DTRUN RANKS_ON_A N program args...   (any program, e.g.
#        bench/bench_ucx --rank, as N ranks on the two hosts, the first RANKS_ON_A on host A)
# Exits 77 (skipped) when namespaces cannot be made here (not root, no ip, no veth) or when
# built without UCX. The namespaces carry this shell's pid; they are removed on every exit but
# SIGKILL (then: ip netns list; ip netns del dtNNNNa).
set -u

# --- a rank: enter its host (called by dtrun through this script) --------------------------
if [ "${1:-}" = "--as-rank" ]; then
    # --as-rank RANKS_ON_A NS_A NS_B program args...
    na=$2 nsa=$3 nsb=$4
    shift 4
    if [ "$RANK" -lt "$na" ]; then
        ns=$nsa host=hostA LOCAL_RANK=$RANK LOCAL_WORLD_SIZE=$na GROUP_RANK=0
    else
        ns=$nsb host=hostB LOCAL_RANK=$((RANK - na)) LOCAL_WORLD_SIZE=$((WORLD_SIZE - na))
        GROUP_RANK=1
    fi
    export LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK
    # ip netns exec and unshare (without --fork) exec in place: dtrun's child stays the rank.
    exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
fi

if [ "${1:-}" = "--run" ]; then
    # --run DTRUN RANKS_ON_A N program args: any program as N ranks on the two hosts, the first
    # RANKS_ON_A on host A; its output on stdout, dtrun's exit status.
    mode=run dtrun=$2 run_na=$3 run_n=$4
    shift 4
else
    mode=test dtrun=$1 prog=$2 train=$3 ckpt=$4
fi
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "two simulated hosts need network namespaces: run as root"
command -v ip > /dev/null || skip "no ip command (Debian package iproute2)"
command -v unshare > /dev/null || skip "no unshare command (util-linux)"

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
tag=dt$$
nsa=${tag}a nsb=${tag}b
tmp=$(mktemp -d)
run_pid=""
cleanup() {
    if [ -n "$run_pid" ]; then # interrupted mid-run: dtrun stops its ranks, then returns
        kill -TERM "$run_pid" 2> /dev/null
        wait "$run_pid" 2> /dev/null
    fi
    ip netns del "$nsa" 2> /dev/null
    ip netns del "$nsb" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Namespaces of this name can only be left over from a SIGKILLed run whose pid this shell has now.
ip netns del "$nsa" 2> /dev/null
ip netns del "$nsb" 2> /dev/null
ip netns add "$nsa" 2> "$tmp/err" || skip "cannot make a network namespace: $(cat "$tmp/err")"
ip netns add "$nsb" 2> "$tmp/err" || skip "cannot make a network namespace: $(cat "$tmp/err")"
ip -n "$nsa" link add "${tag}a" type veth peer name "${tag}b" netns "$nsb" 2> "$tmp/err" ||
    skip "cannot make a veth pair: $(cat "$tmp/err")"
ip -n "$nsa" addr add 10.77.0.1/24 dev "${tag}a" &&
    ip -n "$nsb" addr add 10.77.0.2/24 dev "${tag}b" &&
    for ns in "$nsa" "$nsb"; do
        ip -n "$ns" link set lo up && ip -n "$ns" link set "${tag}${ns#"$tag"}" up || exit 1
    done || {
    echo "cannot configure the veth pair"
    exit 1
}
# A veth end reports no carrier for a moment after it is set up, and UCX leaves out devices
# that are down when a rank starts: wait until both ends are up.
for i in $(seq 100); do
    ip -n "$nsa" -o link show dev "${tag}a" | grep -q "state UP" &&
        ip -n "$nsb" -o link show dev "${tag}b" | grep -q "state UP" && break
    sleep 0.05
done
unshare --uts true 2> "$tmp/err" || skip "cannot make a UTS namespace: $(cat "$tmp/err")"

if [ "$mode" = run ]; then
    "$dtrun" -n "$run_n" --addr 10.77.0.1 sh "$self" --as-rank "$run_na" "$nsa" "$nsb" "$@" &
    run_pid=$!
    wait "$run_pid"
    rc=$?
    run_pid=""
    exit "$rc"
fi

fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# Each run's rendezvous port, below the ephemeral range (32768 on): dtrun's own pick is free in
# this namespace, not in host A's, where an earlier run's connections may still hold it.
port=$((20000 + $$ % 10000))

# hosts NAME RANKS_ON_A N [dtrun options] -- program args: runs N ranks, the first RANKS_ON_A
# on host A; output in $tmp/NAME.txt, exit status in $rc.
hosts() {
    name=$1 na=$2 n=$3
    shift 3
    port=$((port + 1))
    opts="--port $port"
    while [ "$1" != "--" ]; do
        opts="$opts $1"
        shift
    done
    shift
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$dtrun" -n "$n" --addr 10.77.0.1 $opts sh "$self" --as-rank "$na" "$nsa" "$nsb" "$@" \
        > "$tmp/$name.txt" 2>&1 &
    run_pid=$! # waited for in the background, so that a signal reaches the traps at once
    wait "$run_pid"
    rc=$?
    run_pid=""
    secs=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.2f", t1 - t0 }')
    printf '%-10s exit %3d after %5s s\n' "$name" "$rc" "$secs"
    if grep -q "no UCX runtime" "$tmp/$name.txt"; then skip "built without UCX"; fi
}

expect() { # NAME TEXT: the run's output has TEXT
    grep -qF -- "$2" "$tmp/$1.txt" || fail "$1: no \"$2\" in its output"
}

export DT_TIMEOUT_S=30 UCX_LOG_LEVEL=info

# Collectives, 2 x 2: hierarchical on the world, and what each endpoint runs on.
DT_TEST_HOSTS=0,0,1,1 hosts coll-2x2 2 4 -- "$prog" collectives
[ "$rc" = 0 ] || fail "coll-2x2: dtrun exited with $rc"
for r in 0 1 2 3; do expect coll-2x2 "[rank $r] [ok] collectives"; done
grep -q '\[rank 0\] \[ok\] collectives: .* ranks, [1-9][0-9]* hierarchical' "$tmp/coll-2x2.txt" ||
    fail "coll-2x2: no hierarchical all_reduce on rank 0"
# UCX's "ep_cfg[i]: tag(...)" lines, one per kind of endpoint: on every rank one to its host's
# peer with shared memory among its lanes (UCX adds TCP lanes for large messages), and one to
# the other host's ranks on TCP over the veth alone (shared memory or loopback TCP there would
# mean the namespaces leak what a real second host does not share).
for r in 0 1 2 3; do
    grep "^\[rank $r\] .*ep_cfg.*tag(" "$tmp/coll-2x2.txt" | sed 's/.*ep_cfg/ep_cfg/' > "$tmp/eps"
    grep -Eq "tag\([^)]*(posix|sysv)/memory" "$tmp/eps" ||
        fail "coll-2x2: rank $r has no endpoint over shared memory"
    grep -q "tag(tcp/${tag}[ab])" "$tmp/eps" ||
        fail "coll-2x2: rank $r has no endpoint over TCP on the veth alone"
    if grep -Ev "(posix|sysv)/memory" "$tmp/eps" | grep -v "tag(tcp/${tag}[ab])" | grep -q .; then
        fail "coll-2x2: rank $r has an endpoint on other lanes: $(cat "$tmp/eps")"
    fi
done

if grep -q "peer-failure handling" "$tmp/coll-2x2.txt"; then
    fail "coll-2x2: a rank reached the other host without peer-failure handling"
fi

# Shared memory alone between the hosts (UCX_TLS=sm: /dev/shm is shared here, never between
# real hosts): no lane to the other host detects a dead peer, and each rank says so.
UCX_TLS=sm DT_TEST_HOSTS=0,1 hosts sm-2x1 1 2 -- "$prog" collectives
[ "$rc" = 0 ] || fail "sm-2x1: dtrun exited with $rc"
for r in 0 1; do
    expect sm-2x1 "[rank $r] [ok] collectives"
    expect sm-2x1 "rank $r reaches rank $((1 - r)) on another host only without UCX's peer-failure"
done

# 2 x 1: one rank per host, every group flat; then 2 x 2 with DT_UCX_HIER=0: flat too.
DT_TEST_HOSTS=0,1 hosts coll-2x1 1 2 -- "$prog" collectives
[ "$rc" = 0 ] || fail "coll-2x1: dtrun exited with $rc"
for r in 0 1; do expect coll-2x1 "[rank $r] [ok] collectives"; done
expect coll-2x1 "[rank 0] [ok] collectives: " && expect coll-2x1 ", 0 hierarchical all_reduces"
DT_UCX_HIER=0 DT_TEST_HOSTS=0,0,1,1 hosts coll-flat 2 4 -- "$prog" collectives
[ "$rc" = 0 ] || fail "coll-flat: dtrun exited with $rc"
for r in 0 1 2 3; do expect coll-flat "[rank $r] [ok] collectives"; done
expect coll-flat ", 0 hierarchical all_reduces"

# Training: every step's loss equal to the local runtime's on 4 in-process ranks.
args="--steps 3 --dim 32 --layers 1 --heads 4 --kv-heads 2 --hidden 64 --seq 16 --batch 4
      --mesh dp=2,tp=2 --loss-digits 8"
# shellcheck disable=SC2086
"$train" $args --out "$tmp/trace" > "$tmp/local.txt" 2>&1 || fail "train on 4 local ranks"
# shellcheck disable=SC2086
hosts train 2 4 -- "$train" --ucx 1 $args
[ "$rc" = 0 ] || fail "train: dtrun exited with $rc"
grep '^step' "$tmp/local.txt" | awk '{print $4}' > "$tmp/a"
grep '^\[rank 0\] step' "$tmp/train.txt" | awk '{print $6}' > "$tmp/b"
if [ "$(wc -l < "$tmp/a")" -ne 3 ] || [ "$(wc -l < "$tmp/b")" -ne 3 ]; then
    fail "train: expected 3 steps from each run"
elif ! paste "$tmp/a" "$tmp/b" | awk '{
    d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1
    if (d > 1e-5 * a) { printf "step %d: local %s, two hosts %s\n", NR, $1, $2; bad = 1 }
} END { exit bad }'; then
    fail "train: losses differ from the local runtime's"
fi

# A checkpoint saved on 2 x 2 ranks and loaded on 2 + 1 (shards move between hosts).
mkdir "$tmp/ckpt"
hosts ckpt-save 2 4 --grace 5 -- "$ckpt" save "$tmp/ckpt" 1
[ "$rc" = 0 ] || fail "ckpt-save: dtrun exited with $rc"
hosts ckpt-load 2 3 --grace 5 -- "$ckpt" load "$tmp/ckpt" 1
[ "$rc" = 0 ] || fail "ckpt-load: dtrun exited with $rc"
for r in 0 1 2; do expect ckpt-load "[rank $r] [ok] load step 1"; done

# Rank 3 (host B) SIGKILLs itself while hierarchical all_reduces run: ranks 0-2 fail cleanly
# naming it, without waiting for the 30 s timeout.
DT_TIMEOUT_S=10 hosts fault 2 4 --grace 30 -- "$prog" fault
[ "$rc" = 137 ] || fail "fault: dtrun exited with $rc, expected 137 (rank 3's SIGKILL)"
for r in 0 1 2; do expect fault "[rank $r] fault: failed cleanly"; done
expect fault "dtrun: root cause: rank 3 was killed by signal 9"
if grep -q "FAILED BADLY" "$tmp/fault.txt"; then fail "fault: a rank failed badly"; fi
# dtrun's 30 s of grace never ran out: the survivors exited by themselves.
awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "fault: took $secs s"

if [ "$fails" -gt 0 ]; then
    for f in "$tmp"/*.txt; do
        echo "=== $(basename "$f")"
        grep -v "UCX  INFO" "$f" | tail -40
    done
    echo "$fails failed"
    exit 1
fi
echo "two hosts: all passed"
