#!/bin/sh
# dtensor-ckpt on a checkpoint made by the tool itself: convert a safetensors file written
# here (by printf, independently of the library) into a 2x2 sharded checkpoint, inspect and
# verify it, consolidate it back (the same tensor), and fail on a flipped byte.
# Usage: test_ckpt_cli.sh <dtensor-ckpt>
set -eu
tool=$1
dir=$(mktemp -d /tmp/dtckpt-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT
# a: f32 [2,3] = 0..5; header padded with spaces to a multiple of 8 bytes
hdr='{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}'
while [ $(( ${#hdr} % 8 )) -ne 0 ]; do hdr="$hdr "; done
{
    printf "\\$(printf %03o ${#hdr})\\000\\000\\000\\000\\000\\000\\000"
    printf '%s' "$hdr"
    # 0.0 1.0 2.0 3.0 4.0 5.0 as little-endian f32, in octal escapes (POSIX printf)
    printf '\000\000\000\000\000\000\200\077\000\000\000\100'
    printf '\000\000\100\100\000\000\200\100\000\000\240\100'
} > "$dir/in.safetensors"
"$tool" convert "$dir/in.safetensors" "$dir/ck" 2x2 "S(0),S(1)"
"$tool" inspect "$dir/ck" > "$dir/inspect.txt"
grep -q "4 chunks" "$dir/inspect.txt" || { cat "$dir/inspect.txt"; exit 1; }
grep -q "\[S(0),S(1)\] on d0=2,d1=2" "$dir/inspect.txt" || { cat "$dir/inspect.txt"; exit 1; }
grep -q "XXH3-64 per block of 1.0 MiB" "$dir/inspect.txt" || { cat "$dir/inspect.txt"; exit 1; }
grep -q "0 of 4 chunks in tiles" "$dir/inspect.txt" || { cat "$dir/inspect.txt"; exit 1; }
"$tool" verify "$dir/ck" > /dev/null
"$tool" consolidate "$dir/ck" "$dir/out.safetensors" > /dev/null
# the same data (the header gains "__metadata__")
tail -c 24 "$dir/in.safetensors" > "$dir/a.bin"
tail -c 24 "$dir/out.safetensors" > "$dir/b.bin"
cmp "$dir/a.bin" "$dir/b.bin"
grep -q '"a":{"dtype":"F32","shape":\[2,3\],"data_offsets":\[0,24\]}' "$dir/out.safetensors"
f="$dir/ck/rank-00003.safetensors"
size=$(wc -c < "$f")
printf '\377' | dd of="$f" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
if "$tool" verify "$dir/ck" > "$dir/err.txt" 2>&1; then echo "verify passed a flipped byte"; exit 1; fi
grep -q "fails its checksum" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
if "$tool" bogus 2> /dev/null; then exit 1; fi
echo ok
