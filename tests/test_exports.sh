#!/bin/sh
# The shared library exports exactly the public API: every defined dynamic symbol is a
# function declared DT_API in include/ (or a typed wrapper generated from dtensor/op_list.h),
# and every such declaration is exported (a public function with no definition fails here).
# usage: test_exports.sh LIBDTENSOR.so SOURCE_ROOT
set -eu
lib=$1 root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWwi]$/ {print $3}' | sort -u >"$tmp/exported"
{
    grep -rhoE 'DT_API [^(;]*\bdt_[A-Za-z0-9_]+[[:space:]]*\(' "$root/include" |
        grep -oE 'dt_[A-Za-z0-9_]+[[:space:]]*\($' | tr -d ' ('
    # the wrapper column of the op list: the last argument of each X(...) entry
    grep -oE ',[[:space:]]*dt_[a-z0-9_]+\)' "$root/include/dtensor/op_list.h" | tr -d ', )'
} | grep -v '^dt_plugin_register$' | sort -u >"$tmp/declared" # the plugin defines that one
status=0
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
