"""The model of examples/tiny_llama.c in PyTorch, for bench_train's reference: token embedding,
LAYERS blocks of RMSNorm + causal grouped-query attention with interleaved-pair RoPE on q and k
+ RMSNorm + SwiGLU MLP, a final norm and a vocabulary projection into cross_entropy, trained
with AdamW (lr 3e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.01) as examples/train.c does, on
the bytes of a text (tl_batch's windows) or, without one, on random tokens.

Configurations (MODE), parallelized as torchtitan's Llama is:
  eager    one process
  ddp      DistributedDataParallel over NPROC gloo processes (batch split over them)
  fsdp     FSDP2: fully_shard per block (the last block not resharded after forward) and on
           the root (embedding, final norm, output) with reshard_after_forward=True as
           torchtitan's apply_fsdp passes it (not pp_enabled); DT_TORCH_ROOT_AUTO=1 leaves it
           to FSDP2 (None: the root stays gathered after forward)
  tp       tensor parallel over NPROC with sequence parallel norms and loss parallel
           (torchtitan's plan: tok_embeddings rowwise to Shard(1), wq/wk/wv/w1/w3 colwise,
           wo/w2 rowwise to Shard(1), norms SequenceParallel, attention and feed_forward
           inputs gathered once, output colwise kept vocab-sharded into loss_parallel)
  fsdp_tp  a 2-D mesh (dp, tp) = (NPROC / 2, 2): tp as above, then FSDP2 over dp
When the kv heads do not split over tp (2 kv heads on tp=4), k and v are gathered over tp
(their gradients reduce_scattered back) and each rank picks the kv heads of its query heads.

A step's time runs from the first rank's start to the last rank's end (each rank's
perf_counter stamps, gathered after the last step). Collectives per step are counted on rank 0
by torch.profiler over one step after the warm-up (not a timed one): every collective gloo runs
(its "gloo:<collective>" events: FSDP2's all_gather_into_tensor and reduce_scatter_tensor,
DDP's bucket all_reduce from its C++ reducer and DTensor's functional collectives alike;
DT_TORCH_COMMS=1 prints them by kind). Prints one line on rank 0:
    median_ms min_ms max_ms collectives loss_1 ... loss_S
(S = WARMUP + 1 + STEPS; the loss is the global batch's mean, on every configuration).

    python train_torch.py [--profile PREFIX] MODE V T B C LAYERS HEADS KV_HEADS HIDDEN STEPS NPROC [TEXT]

--profile PREFIX: torch.profiler records the STEPS steps after the warm-up (and the counted
step) on every rank, one ProfilerStep#N span per step (N = the step's index from 0, warm-up
included), with shapes and the nn.Module stack, and writes PREFIX_rank<R>.json (Chrome trace
JSON, as export_chrome_trace writes it; tools/dtensor-trace-torch converts it). The step's
collectives are then counted from that recording; the times include the profiler's overhead.
"""
import contextlib
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

WARMUP = 4  # as bench_train.c: the steps after are steady (allocators warm)


class Attention(nn.Module):
    def __init__(self, C, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, C // heads
        self.wq = nn.Linear(C, heads * self.hd, bias=False)
        self.wk = nn.Linear(C, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(C, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, C, bias=False)
        self.tp = None  # (mesh, size, rank) when k and v are gathered over tp

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, -1, self.hd)
        k, v = self.wk(x), self.wv(x)
        if self.tp is not None:  # kv heads fewer than tp ranks: gather k, v over tp
            from torch.distributed.tensor import Partial, Replicate
            k, v = (t.redistribute(self.tp[0], [Replicate()]).to_local(grad_placements=[Partial()])
                    for t in (k, v))
        k, v = k.view(B, T, -1, self.hd), v.view(B, T, -1, self.hd)
        hq = q.shape[2]
        first = self.tp[2] * hq if self.tp is not None else 0
        group = self.heads // self.kv_heads
        if self.tp is not None:  # the kv heads of this rank's query heads
            idx = torch.arange(first, first + hq) // group
            k, v = k[:, :, idx], v[:, :, idx]
        q, k = rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2)
        v = v.transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=k.shape[1] != q.shape[1])
        return self.wo(a.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.w1 = nn.Linear(C, hidden, bias=False)
        self.w2 = nn.Linear(hidden, C, bias=False)
        self.w3 = nn.Linear(C, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, C, heads, kv_heads, hidden):
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        self.attention = Attention(C, heads, kv_heads)
        self.feed_forward = MLP(C, hidden)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


def rope(x, cos, sin):
    """dt_rope: pairs (2i, 2i+1) of the head dim rotated by position t's angle t theta^-2i/D."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Tiny(nn.Module):
    def __init__(self, V, T, C, layers, heads, kv_heads, hidden):
        super().__init__()
        self.tok_embeddings = nn.Embedding(V, C)
        self.layers = nn.ModuleDict({str(i): Block(C, heads, kv_heads, hidden)
                                     for i in range(layers)})
        self.norm = nn.RMSNorm(C, eps=1e-5)
        self.output = nn.Linear(C, V, bias=False)
        D = C // heads
        inv = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)  # (T, D/2)
        self.cos, self.sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        # tiny_llama's init: normal, std 1 for the embedding, 1/sqrt(fan_in) for projections
        for name, p in self.named_parameters():
            if "norm" in name:
                continue
            nn.init.normal_(p, std=1.0 if "tok_embeddings" in name else p.shape[1] ** -0.5)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for block in self.layers.values():
            x = block(x, self.cos, self.sin)
        return self.output(self.norm(x))


def batches(step, V, T, B, text):
    """tl_batch's windows: xorshift from the step picks each row's position in the text."""
    if text is None:
        g = torch.Generator().manual_seed(step)
        tok = torch.randint(0, V, (B, T + 1), generator=g)
        return tok[:, :T], tok[:, 1:]
    M = (1 << 64) - 1
    x = (0x9e3779b97f4a7c15 * (step + 1)) & M
    rows = []
    for _ in range(B):
        x ^= (x << 13) & M
        x ^= x >> 7
        x ^= (x << 17) & M
        at = x % (len(text) - T - 1)
        rows.append([b % V for b in text[at:at + T + 1]])
    tok = torch.tensor(rows, dtype=torch.int64)
    return tok[:, :T], tok[:, 1:]


def apply_tp(model, mesh, heads, kv_heads):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    tp = mesh.size()
    parallelize_module(model, mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                  use_local_output=False),
    })
    whole_kv = kv_heads % tp == 0
    for block in model.layers.values():
        parallelize_module(block, mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(use_local_output=whole_kv),
            "attention.wv": ColwiseParallel(use_local_output=whole_kv),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })
        if not whole_kv:
            block.attention.tp = (mesh, tp, mesh.get_local_rank())
    assert heads % tp == 0, "query heads must split over tp"


def apply_fsdp(model, mesh):
    from torch.distributed.fsdp import fully_shard
    n = len(model.layers)
    for i, block in model.layers.items():
        fully_shard(block, mesh=mesh, reshard_after_forward=int(i) < n - 1)
    # torchtitan's apply_fsdp passes the root reshard_after_forward=not pp_enabled (True);
    # torch 2.15 honours it (the root is gathered again in backward). DT_TORCH_ROOT_AUTO=1
    # leaves it None: FSDP2's own policy, which keeps the root gathered after forward.
    root = None if os.environ.get("DT_TORCH_ROOT_AUTO") else True
    fully_shard(model, mesh=mesh, reshard_after_forward=root)


class Counter:
    """Collectives run by this process during one step: the "gloo:<collective>" events that
    ProcessGroupGloo records in torch.profiler for every collective it runs, whoever calls it
    (FSDP2's all_gather_into_tensor and reduce_scatter_tensor, DDP's bucket all_reduce from its
    C++ reducer, DTensor's functional collectives, the loss_parallel reductions)."""

    def __init__(self, rank):
        from torch.profiler import ProfilerActivity, profile
        self.rank = rank
        self.prof = profile(activities=[ProfilerActivity.CPU],
                            record_shapes=bool(os.environ.get("DT_TORCH_COMMS")))

    def __enter__(self):
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)

    def count(self):
        kinds = {}
        for e in self.prof.events():
            if e.name.startswith("gloo:"):
                kinds[e.name] = kinds.get(e.name, 0) + 1
        if os.environ.get("DT_TORCH_COMMS") and self.rank == 0:
            print("collectives by kind:", kinds, file=sys.stderr)
            for e in sorted(self.prof.events(), key=lambda e: e.time_range.start):
                if e.name.startswith("gloo:"):
                    print(" ", e.name, e.input_shapes, file=sys.stderr)
        return sum(kinds.values())


def step_collectives(path, step):
    """The "gloo:" events that start inside ProfilerStep#step's "train_step" span of a --profile
    trace file (what Counter counts), read back from the exported JSON (the gloo threads'
    events included)."""
    import json
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"] == f"ProfilerStep#{step}"]
    if not steps:
        return 0
    lo, hi = steps[0]["ts"], steps[0]["ts"] + steps[0]["dur"]
    spans = [e for e in events if e["name"] == "train_step" and lo <= e["ts"] <= hi]
    if not spans:
        return 0
    t0, t1 = spans[0]["ts"], spans[0]["ts"] + spans[0]["dur"]
    return sum(1 for e in events if e["name"].startswith("gloo:") and t0 <= e["ts"] <= t1)


def step_spans(stamps, world):
    """Each timed step on every rank, in ms: from the first rank's start to the last rank's end
    (perf_counter is CLOCK_MONOTONIC, one clock for the machine's processes). Rank 0's own
    t1 - t0 leaves out what the others still run after it ends, as DDP's AdamW after the last
    all_reduce. stamps: this rank's (t0, t1) per step, gathered once after the loop."""
    mine = torch.tensor(stamps, dtype=torch.float64)
    every = [mine]
    if world > 1:
        import torch.distributed as dist
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
    first = torch.stack([e[:, 0] for e in every]).min(dim=0).values
    last = torch.stack([e[:, 1] for e in every]).max(dim=0).values
    return [float(v) * 1e3 for v in last - first]


def run(mode, V, T, B, C, layers, heads, kv_heads, hidden, steps, rank=0, world=1, port=0,
        text=None, profile=None):
    import torch.distributed as dist
    torch.manual_seed(1234)
    model = Tiny(V, T, C, layers, heads, kv_heads, hidden)
    dp, dp_rank, loss_parallel = 1, 0, False
    if mode != "eager":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.set_num_threads(1)
        from torch.distributed.device_mesh import init_device_mesh
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            model = DistributedDataParallel(model)
            dp, dp_rank = world, rank
        elif mode == "fsdp":
            mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
            apply_fsdp(model, mesh)
            dp, dp_rank = world, rank
        elif mode == "tp":
            mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
            apply_tp(model, mesh, heads, kv_heads)
            loss_parallel = True
        elif mode == "fsdp_tp":
            mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
            apply_tp(model, mesh["tp"], heads, kv_heads)
            apply_fsdp(model, mesh["dp"])
            dp, dp_rank, loss_parallel = world // 2, mesh.get_local_rank("dp"), True
        else:
            raise SystemExit(f"train_torch.py: unknown mode {mode}")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.01)
    rows = B // dp
    stamps, losses, colls = [], [], 0
    prof = None
    if profile:
        # one recording from the counted step to the end; prof.step() below closes each
        # ProfilerStep#N span (with_stack keeps the "nn.Module: <Class>_<k>" frames)
        from torch.profiler import ProfilerActivity, profile as torch_profile, schedule
        prof = torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                             with_stack=True,
                             schedule=schedule(wait=WARMUP - 1, warmup=1, active=1 + steps,
                                               repeat=1))
        prof.__enter__()
    for s in range(WARMUP + 1 + steps):
        idx, tgt = batches(s, V, T, B, text)
        idx, tgt = idx[dp_rank * rows:(dp_rank + 1) * rows], tgt[dp_rank * rows:(dp_rank + 1) * rows]
        if mode != "eager":
            dist.barrier()
        counting = s == WARMUP
        counter = Counter(rank) if counting and not prof else None
        if counter:
            counter.__enter__()
        t0 = time.perf_counter()
        # under --profile, "train_step" marks the part Counter would count
        with record_function("train_step") if prof else contextlib.nullcontext():
            logits = model(idx)
            if loss_parallel:
                from torch.distributed.tensor.parallel import loss_parallel as lp
                with lp():
                    loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
                    loss.backward()
            else:
                loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        if counter:
            counter.__exit__(None, None, None)
            colls = counter.count()
        elif s > WARMUP:
            stamps.append((t0, t1))
        # the global batch's mean loss, outside the timed and counted part
        value = loss.detach()
        if hasattr(value, "full_tensor"):
            value = value.full_tensor()
        if dp > 1:
            value = value.clone()
            dist.all_reduce(value)
            value /= world  # every rank of a dp group holds the same local mean
        losses.append(float(value))
        if prof:
            prof.step()  # closes ProfilerStep#s
    if prof:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(f"{profile}_rank{rank}.json")
        colls = step_collectives(f"{profile}_rank{rank}.json", WARMUP)
    times = step_spans(stamps, world)
    if rank == 0:
        print(f"{statistics.median(times):.3f} {min(times):.3f} {max(times):.3f} {colls} "
              + " ".join(f"{v:.8f}" for v in losses), flush=True)
    if mode != "eager":
        # No rank tears gloo down while a peer still talks to it, and DDP's reducer goes before
        # its process group: without both, about one DDP run in fifteen died at exit with
        # "terminate called without an active exception".
        dist.barrier()
        del model, opt
        dist.destroy_process_group()
        # The figures are out, but the interpreter's own teardown could still die the same way
        # (seen in tp runs: a C++ thread left joinable at exit), and bench_train then dropped a
        # finished measurement. Leave without that teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def main():
    profile = None
    if len(sys.argv) > 2 and sys.argv[1] == "--profile":
        profile = sys.argv[2]
        del sys.argv[1:3]
    if len(sys.argv) < 12:
        raise SystemExit(__doc__)
    mode = sys.argv[1]
    V, T, B, C, layers, heads, kv_heads, hidden, steps, world = (int(a) for a in sys.argv[2:12])
    text = None
    if len(sys.argv) > 12:
        with open(sys.argv[12], "rb") as f:
            text = f.read()
    args = (mode, V, T, B, C, layers, heads, kv_heads, hidden, steps)
    if mode == "eager":
        run(*args, text=text, profile=profile)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp
    procs = []
    ctx = mp.get_context("spawn")
    for r in range(world):
        p = ctx.Process(target=run, args=args + (r, world, port, text, profile))
        p.start()
        procs.append(p)
    code = 0
    for p in procs:
        p.join()
        code = code or p.exitcode
    sys.exit(code)


if __name__ == "__main__":
    main()
