#!/bin/sh
# make fresh-check: the README's two commands, `make demo` then `make test`, run as root in a
# minimal Debian 12 root (debootstrap minbase plus git, ca-certificates and make) on a clone of
# the committed HEAD, never the working tree: what a bare machine meets. Nothing of the host
# reaches it: no CUDA toolkit, no package installed by hand, none of its environment.
#   fresh-check.sh           the check; ends with a verdict line, exits 1 when a command failed
#   fresh-check.sh --probe   whether it can run here: exit 0, or the reason on stdout and exit 1
# FRESH_REV=<commit> checks that commit (an ancestor of HEAD) instead of HEAD.
# The root is made from the machine's own apt sources (Debian's bookworm entries) and cached in
# build-fresh/ as a tarball for a week; every check starts from a fresh copy of it.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
dir=${FRESH_DIR:-$top/build-fresh}
suite=bookworm
base_pkgs="git ca-certificates make"
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { echo "fresh-check: $*"; }
die() { say "$*" >&2; exit 1; }

# The host's deb entries as "URI SUITE COMPONENTS...", from one-line .list files and deb822
# .sources files alike, as apt reads them (other names in sources.list.d are ignored).
apt_entries() {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk '$1 == "deb" { c = ""; for (i = 4; i <= NF; i++) c = c " " $i; print $2, $3 c }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'function flush(   n, m, i, j, u, s) {
                 if (f["types"] ~ /(^| )deb( |$)/ && f["enabled"] !~ /^ *no/) {
                     n = split(f["uris"], u, " "); m = split(f["suites"], s, " ")
                     for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
                         print u[i], s[j], f["components"]
                 }
                 split("", f); key = ""
             }
             /^#/ { next }
             /^[ \t]*$/ { flush(); next }
             /^[ \t]/ { if (key != "") f[key] = f[key] " " $0; next }
             { key = tolower(substr($0, 1, index($0, ":") - 1))
               f[key] = substr($0, index($0, ":") + 1) }
             END { flush() }' "$f"
    done
}

# Debian 12's entries (bookworm, bookworm-updates, bookworm-security...); deb.debian.org
# where the host has none. FRESH_MIRROR overrides the mirror debootstrap uses.
debian_entries() {
    e=$(apt_entries | awk -v s="$suite" '$2 == s || index($2, s "-") == 1 || index($2, s "/") == 1')
    [ -n "$e" ] || e="http://deb.debian.org/debian $suite main
http://deb.debian.org/debian $suite-updates main
http://deb.debian.org/debian-security $suite-security main"
    echo "$e"
}
mirror=${FRESH_MIRROR:-$(debian_entries | awk -v s="$suite" '$2 == s { print $1; exit }')}
mirror=${mirror%/}

probe() {
    [ "$(id -u)" = 0 ] || { echo "not root (debootstrap, chroot and mounts need root)"; return 1; }
    command -v unshare >/dev/null || { echo "no unshare (util-linux)"; return 1; }
    # shellcheck disable=SC2016
    unshare --mount --propagation private sh -c 'd=$(mktemp -d) && mount --bind /proc "$d" &&
        umount "$d" && rmdir "$d"' >/dev/null 2>&1 ||
        { echo "cannot bind-mount in a mount namespace here (no CAP_SYS_ADMIN?)"; return 1; }
    mkdir -p "$dir"
    free=$(df -Pk "$dir" | awk 'NR == 2 { print int($4 / 1048576) }')
    [ "$free" -ge 6 ] || { echo "only $free GiB free under $dir (6 needed)"; return 1; }
    t=$(mktemp -d)
    ok=0
    timeout 30 /usr/lib/apt/apt-helper -o APT::Sandbox::User=root -o Acquire::http::Timeout=10 \
        -o Acquire::https::Timeout=10 download-file "$mirror/dists/$suite/Release" "$t/Release" \
        >/dev/null 2>&1 && grep -q "^Codename: $suite" "$t/Release" && ok=1
    rm -rf "$t"
    [ "$ok" = 1 ] || { echo "mirror $mirror unreachable (no $suite Release file within 30 s)"; return 1; }
    echo "mirror $mirror reachable"
}
if [ "${1:-}" = --probe ]; then
    probe
    exit
fi

# Everything below runs in a private mount namespace: the bind mounts are never seen outside
# it and go away with it, however this script ends.
if [ -z "${DT_FRESH_NS:-}" ]; then
    [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and mounts need it)"
    DT_FRESH_NS=1 exec unshare --mount --propagation private sh "$0" "$@"
fi

mounted=""
mount_root() { # root
    for m in proc sys dev dev/pts dev/shm; do
        mkdir -p "$1/$m"
        mount --bind "/$m" "$1/$m"
        mounted="$1/$m $mounted"
    done
}
unmount_root() {
    for m in $mounted; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
    mounted=""
}
# What the tests mounted inside a root (ip netns mounts its run/netns), deepest first; this
# script runs in a mount namespace of its own, so nothing outside it is touched.
unmount_inside() { # root
    awk -v r="$1/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" || true; done
}
trap unmount_root EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# rm -rf that stays on the root's own file system and refuses a tree with anything mounted.
remove_tree() {
    [ -e "$1" ] || return 0
    unmount_inside "$1"
    ! grep -q " $1/" /proc/mounts || die "$1 still has mounts: not removed"
    rm -rf --one-file-system "$1"
}

# A command as root in the root, with a bare machine's environment (no host PATH or CUDA).
in_root() { # root, shell command
    chroot "$1" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb PATH=$path \
        ${http_proxy:+http_proxy=$http_proxy} ${https_proxy:+https_proxy=$https_proxy} \
        /bin/sh -c "$2"
}

# What a Debian 12 machine has in /etc beyond the base: its apt sources and its resolver.
setup_etc() { # root
    debian_entries | awk '{ print "deb", $0 }' > "$1/etc/apt/sources.list"
    rm -f "$1"/etc/apt/sources.list.d/*
    cp /etc/resolv.conf /etc/hosts "$1/etc/"
}

start=$(date +%s)
mkdir -p "$dir"
key=$(printf '%s\n' "$suite" "$mirror" "$base_pkgs" | md5sum | cut -c1-12)
base=$dir/base-$suite-$key.tar
if [ -f "$base" ] && [ -z "$(find "$base" -mtime +7)" ]; then
    say "base root: $base (cached)"
else
    command -v debootstrap >/dev/null || sh tools/ensure-deps.sh debootstrap
    stage=$dir/stage
    remove_tree "$stage"
    say "debootstrap --variant=minbase $suite from $mirror (log: $dir/debootstrap.log)"
    debootstrap --variant=minbase "$suite" "$stage" "$mirror" > "$dir/debootstrap.log" 2>&1 ||
        { tail -20 "$dir/debootstrap.log"; die "debootstrap failed"; }
    setup_etc "$stage"
    mount_root "$stage"
    in_root "$stage" "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
        apt-get install -y -qq --no-install-recommends $base_pkgs > /dev/null &&
        apt-get clean && rm -rf /var/lib/apt/lists/*" || die "installing $base_pkgs failed"
    unmount_root
    rm -f "$dir"/base-*.tar
    tar --numeric-owner -C "$stage" -cf "$base.tmp" .
    mv "$base.tmp" "$base"
    remove_tree "$stage"
    say "base root cached: $base ($(($(date +%s) - start)) s)"
fi

root=$dir/root
remove_tree "$root"
mkdir -p "$root"
tar --numeric-owner -C "$root" -xpf "$base"
setup_etc "$root"
rev=$(git rev-parse --verify "${FRESH_REV:-HEAD}^{commit}") || die "no commit ${FRESH_REV:-HEAD}"
commit="$(git log -1 --format=%h "$rev") ($(git log -1 --format=%s "$rev" | cut -c1-60))"
branch=$(git symbolic-ref -q HEAD || true)
git bundle create "$root/root/dtensor.bundle" HEAD ${branch:+"$branch"} 2>/dev/null
mount_root "$root"
in_root "$root" "git clone -q /root/dtensor.bundle /root/dtensor && rm /root/dtensor.bundle &&
    cd /root/dtensor && git checkout -q $rev" || die "git clone of $commit in the root failed"
say "testing $commit in $root (Debian 12 minbase + $base_pkgs)"

run() { # name: the README's command, from the clone, with its time
    t=$(date +%s)
    say "--- $1 ---"
    if in_root "$root" "cd /root/dtensor && $1"; then rc=0; else rc=$?; fi
    say "$1: exit $rc in $(($(date +%s) - t)) s"
    return "$rc"
}
failed=""
run "make demo" || failed="$failed, make demo"
run "make test" || failed="$failed, make test"
unmount_root
total=$(($(date +%s) - start))
if [ -n "$failed" ]; then
    say "FAIL (${failed#, } failed) on a fresh Debian 12 root, $total s; the root is left in $root"
    exit 1
fi
remove_tree "$root" # 2 GB; kept only after a failure
say "PASS: make demo and make test on a fresh Debian 12 root ($commit), $total s"
