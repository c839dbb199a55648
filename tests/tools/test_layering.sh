#!/bin/sh
# The layers as src/layers.txt orders them: every include of src/ and include/dtensor/, and every
# symbol a layer's library uses from another's, within the table (tools/check_layers.py). Then
# the kernels, with everything they include: every CPU kernel file (src/ops/cpu) and every CUDA
# kernel file (src/ops/cuda/*.cu, preprocessed against tests/cudasim's CUDA headers) declares no
# mesh, communicator, context or tensor: kernels see blocks of local data only.
# usage: test_layering.sh SOURCE_ROOT BUILD_DIR
set -eu
root=$1 build=$2
status=0 n=0
python3 "$root/tools/check_layers.py" "$root" "$build" || status=1
inc="-I$root/include -I$root/src -I$build -D_GNU_SOURCE"
check() { # file, preprocessor command...
    f=$1
    shift
    if ! out=$("$@" 2>&1); then
        echo "$f: does not preprocess: $(echo "$out" | head -3)"
        status=1
    elif echo "$out" | grep -wqE 'dt_mesh|dt_comm|dt_ctx|dt_tensor'; then
        echo "$f: reaches the tensor API: $(echo "$out" | grep -wE 'dt_mesh|dt_comm|dt_ctx|dt_tensor' | head -1)"
        status=1
    fi
    n=$((n + 1))
}
for f in "$root"/src/ops/cpu/*.c; do
    check "$f" cc -E $inc "$f"
done
if command -v c++ >/dev/null; then
    for f in "$root"/src/ops/cuda/*.cu; do
        check "$f" c++ -E -x c++ $inc -I"$root/tests/cudasim/include" "$f"
    done
fi
echo "$n kernel files checked"
exit $status
