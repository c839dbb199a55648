// The public headers compile as C++ and their inline helpers link.
#include <dtensor.h>

int main() {
    dt_placement p = dt_shard(-1);
    dt_placement q = dt_replicate();
    return (p.kind == DT_PLACEMENT_SHARD && q.kind == DT_PLACEMENT_REPLICATE &&
            dt_dtype_size(DT_BF16) == 2) ? 0 : 1;
}
