"""The model of examples/tiny_llama.c in PyTorch (one block: RMSNorm, causal attention with
interleaved-pair RoPE on q and k, SwiGLU MLP, final norm and vocabulary projection), for
bench_train's reference: one training
step (forward, backward, SGD) in eager mode on one process, or with DTensor tensor parallelism
(colwise q/k/v, gate/up and head, rowwise o and down, loss parallel) on N gloo processes.
Prints one line: median_ms min_ms max_ms (over the timed steps, rank 0).

    python train_torch.py eager|dtensor V T B C HEADS HIDDEN STEPS [NPROC]
"""
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Tiny(nn.Module):
    def __init__(self, V, C, heads, hidden):
        super().__init__()
        self.heads, self.hd = heads, C // heads
        self.emb = nn.Embedding(V, C)
        self.n1, self.n2, self.n3 = nn.RMSNorm(C), nn.RMSNorm(C), nn.RMSNorm(C)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(C, hidden, bias=False), nn.Linear(C, hidden, bias=False)
        self.w2 = nn.Linear(hidden, C, bias=False)
        self.head = nn.Linear(C, V, bias=False)
        self.T = 0

    def rope(self, x):
        """dt_rope: pairs (2i, 2i+1) of the head dim rotated by position t's angle t theta^-2i/D."""
        T, D = x.shape[1], x.shape[-1]
        if self.T != T:
            inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
            ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)  # (T, D/2)
            self.cos, self.sin, self.T = ang.cos()[:, None, :], ang.sin()[:, None, :], T
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * self.cos - x1 * self.sin, x0 * self.sin + x1 * self.cos),
                           dim=-1).flatten(-2)

    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx)
        h = self.n1(x)
        q, k, v = (w(h).view(B, T, -1, self.hd) for w in (self.wq, self.wk, self.wv))
        q, k, v = self.rope(q).transpose(1, 2), self.rope(k).transpose(1, 2), v.transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, -1))
        h = self.n2(x)
        x = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return self.head(self.n3(x))


def batch(step, V, T, B):
    g = torch.Generator().manual_seed(step)
    tok = torch.randint(0, V, (B, T + 1), generator=g)
    return tok[:, :T], tok[:, 1:]


def run(mode, V, T, B, C, heads, hidden, steps, rank=0, world=1, port=0):
    ctx = None
    model = Tiny(V, C, heads, hidden)
    if mode == "dtensor":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                       loss_parallel, parallelize_module)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.set_num_threads(1)
        mesh = init_device_mesh("cpu", (world,))
        plan = {n: ColwiseParallel() for n in ("wq", "wk", "wv", "w1", "w3")}
        plan.update(wo=RowwiseParallel(), w2=RowwiseParallel(),
                    head=ColwiseParallel(use_local_output=False))
        parallelize_module(model, mesh, plan)
        ctx = loss_parallel
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    times = []
    for s in range(steps + 3):
        idx, tgt = batch(s, V, T, B)
        t0 = time.perf_counter()
        logits = model(idx)
        if ctx:
            with ctx():
                loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
                loss.backward()
        else:
            loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if mode == "dtensor":
            torch.distributed.barrier()
        if s >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        print(f"{statistics.median(times):.3f} {min(times):.3f} {max(times):.3f}", flush=True)
    if mode == "dtensor":
        torch.distributed.destroy_process_group()


def main():
    mode = sys.argv[1]
    V, T, B, C, heads, hidden, steps = (int(a) for a in sys.argv[2:9])
    if mode == "eager":
        run(mode, V, T, B, C, heads, hidden, steps)
        return
    world = int(sys.argv[9])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp
    procs = []
    ctx = mp.get_context("spawn")
    for r in range(world):
        p = ctx.Process(target=run, args=(mode, V, T, B, C, heads, hidden, steps, r, world, port))
        p.start()
        procs.append(p)
    for p in procs:
        p.join()
        if p.exitcode:
            sys.exit(p.exitcode)


if __name__ == "__main__":
    main()
