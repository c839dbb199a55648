"""PyTorch DTensor's redistribute on gloo, for bench_ucx_redistribute's reference: NPROC
processes on this host, a 1-D DeviceMesh, MIB MiB of f32 per rank in the shapes of
bench/bench_redistribute.c (rows = MIB MiB / 4 KiB): S(0) of (NPROC*rows, 1024), S(1) of
(rows, NPROC*1024) and Partial of (rows, 1024), each made once with DTensor.from_local.

Six transitions: S(0)->R, S(1)->R, P->R, P->S(0), P->S(1), S(0)->S(1). A round runs each once,
interleaved, timed on rank 0 from a barrier to the barrier after the result is complete (a
functional collective's AsyncCollectiveTensor is waited for); one warm-up round, then REPS.
Prints one line per transition on rank 0:  name median_ms min_ms max_ms

    python redistribute_torch.py NPROC MIB REPS
"""
import os
import socket
import statistics
import sys
import time

import torch

CASES = [("S(0)->R", "S0", "R"), ("S(1)->R", "S1", "R"), ("P->R", "P", "R"),
         ("P->S(0)", "P", "S0"), ("P->S(1)", "P", "S1"), ("S(0)->S(1)", "S0", "S1")]


def run(rank, world, port, mib, reps):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (world,))
    rows = mib * (1 << 20) // 4 // 1024
    place = {"S0": Shard(0), "S1": Shard(1), "P": Partial(), "R": Replicate()}
    # every byte 0x01 as bench_input fills dtensor's inputs: small normal floats
    local = torch.full((rows, 1024), 2.3694278e-38, dtype=torch.float32)
    inputs = {k: DTensor.from_local(local.clone(), mesh, [place[k]], run_check=False)
              for k in ("S0", "S1", "P")}
    times = {name: [] for name, _, _ in CASES}
    for r in range(-1, reps):
        for name, src, dst in CASES:
            dist.barrier()
            t0 = time.perf_counter()
            out = inputs[src].redistribute(mesh, [place[dst]]).to_local()
            if hasattr(out, "wait"):  # AsyncCollectiveTensor
                out = out.wait()
            dist.barrier()
            t1 = time.perf_counter()
            del out
            if r >= 0:
                times[name].append((t1 - t0) * 1e3)
    if rank == 0:
        for name, _, _ in CASES:
            v = times[name]
            print(f"{name} {statistics.median(v):.3f} {min(v):.3f} {max(v):.3f}", flush=True)
    dist.destroy_process_group()


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    world, mib, reps = (int(a) for a in sys.argv[1:4])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=run, args=(r, world, port, mib, reps)) for r in range(world)]
    for p in procs:
        p.start()
    code = 0
    for p in procs:
        p.join()
        code = code or p.exitcode
    sys.exit(code)


if __name__ == "__main__":
    main()
