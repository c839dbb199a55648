#!/bin/sh
# The shared library exports exactly the public API: every function declared in include/
# carries DT_API; every defined dynamic symbol is one of them; every one of them is exported (a
# public function with no definition fails here).
# usage: test_exports.sh LIBDTENSOR.so SOURCE_ROOT
set -eu
lib=$1 root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWwi]$/ {print $3}' | sort -u >"$tmp/exported"
{
    grep -rhoE 'DT_API [^(;]*\bdt_[A-Za-z0-9_]+[[:space:]]*\(' "$root/include" |
        grep -oE 'dt_[A-Za-z0-9_]+[[:space:]]*\($' | tr -d ' ('
} | grep -v '^dt_plugin_register$' | sort -u >"$tmp/declared" # the plugin defines that one
status=0
# a public function declared without DT_API would be hidden from the shared library
bare=$(grep -nE '^(const |unsigned )?[a-z_0-9]+ \**dt_[a-z_0-9]+\(' "$root"/include/dtensor/*.h || true)
if [ -n "$bare" ]; then
    echo "declared in include/ without DT_API:"
    echo "$bare" | sed 's/^/  /'
    status=1
fi
leaked=$(comm -23 "$tmp/exported" "$tmp/declared")
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
if [ -n "$leaked" ]; then
    echo "exported but not declared DT_API in include/:"
    echo "$leaked" | sed 's/^/  /'
    status=1
fi
if [ -n "$missing" ]; then
    echo "declared in include/ but not exported (no definition?):"
    echo "$missing" | sed 's/^/  /'
    status=1
fi
echo "$(wc -l <"$tmp/exported") symbols exported, $(wc -l <"$tmp/declared") declared"
exit $status
