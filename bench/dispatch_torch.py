"""PyTorch DTensor's cached dispatch, for bench_dispatch's reference: the same case as its cached
add (two f32 4x4 DTensors on a 1-rank CPU mesh, Shard(0), one process on gloo), a + b timed in
the thread's CPU time, best of REPS x N calls, after a warm-up that fills DTensor's sharding
cache; plain torch's add of the local 4x4 tensors the same way. Prints one line:
    dtensor_ns torch_ns

    python dispatch_torch.py [N [REPS]]
"""
import os
import socket
import sys
import time

import torch


def best_ns(fn, n, reps):
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time_ns() - t0) / n)
    return best


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    with socket.socket() as s:  # a free port for the one-rank group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (1,))
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    a = DTensor.from_local(x.clone(), mesh, [Shard(0)], run_check=False)
    b = DTensor.from_local(x.clone(), mesh, [Shard(0)], run_check=False)
    la, lb = x.clone(), x.clone()
    for _ in range(1000):  # no input requires grad, as in dtensor's bench
        a + b
        la + lb
    dt = best_ns(lambda: a + b, max(n // 10, 1), reps)  # tens of times dtensor's call
    pt = best_ns(lambda: la + lb, n, reps)
    print(f"{dt:.1f} {pt:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
