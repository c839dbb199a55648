#!/bin/sh
# The README's API tour is a program that builds and runs: its first C block, compiled against
# include/ and the shared library, runs on 4 in-process ranks and exits 0.
# usage: test_readme.sh SOURCE_ROOT LIBDTENSOR.so [SANITIZE]
# SANITIZE: the build's b_sanitize (address,undefined under make test-asan): the tour is
# built with it too, so that the sanitizers' runtime comes first, as they require.
set -eu
root=$1 lib=$2 san=${3:-none}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^```c$/ { on = 1; next } /^```$/ && on { exit } on' "$root/README.md" >"$tmp/tour.c"
test -s "$tmp/tour.c" || { echo "README.md has no C block"; exit 1; }
libdir=$(dirname "$lib")
sanflags=
[ "$san" = none ] || sanflags="-fsanitize=$san"
${CC:-cc} -std=c11 -Wall -Werror $sanflags -I"$root/include" -I"$libdir" "$tmp/tour.c" -L"$libdir" -ldtensor \
    -Wl,-rpath,"$libdir" -o "$tmp/tour"
"$tmp/tour" >"$tmp/out" 2>&1 || { cat "$tmp/out"; echo "the README's tour failed"; exit 1; }
echo "the README's tour ($(wc -l <"$tmp/tour.c") lines) built and ran"
