#!/usr/bin/env python3
"""Allreduce timings of torch.distributed's gloo backend, for comparison with
gohorovod's transports on the same machine (a yardstick in docs/BENCHMARKS.md).

Cases, as cmd/hvdbench prints them (key=value lines, medians over the timed
steps of the slowest rank per step):
  resnet50        ResNet-50's 161 gradient tensors (float32), one allreduce each
  resnet50-25MiB  the same gradients packed into buckets of at most 25 MiB, one
                  allreduce per bucket (as torch DDP does by default)
  64MiB           one 64 MiB float32 tensor
  4MB             one tensor of 4,096,000 bytes (the bytes of 4KiBx1000)
  4KiBx1000       1000 tensors of 4 KiB, one allreduce each

Usage: torch_gloo_bench.py --np 2 --shapes examples/synthetic/shapes/resnet50_shapes.txt
Across nodes (cmd/nodebench), one process per rank, each started on its node:
  torch_gloo_bench.py --np 3 --rank R --master HOST:PORT --shapes ... [--cases 64MiB,resnet50]
"""
import argparse
import os
import statistics
import time


def shapes_of(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            dims = [int(d) for d in line.split("\t")[1].split("x")]
            n = 1
            for d in dims:
                n *= d
            out.append(n)
    return out


def buckets(sizes, cap_bytes):
    out, cur = [], 0
    for n in reversed(sizes):  # backward order, as DDP fills its buckets
        if cur and (cur + n) * 4 > cap_bytes:
            out.append(cur)
            cur = 0
        cur += n
    if cur:
        out.append(cur)
    return out


def worker(rank, np_, master, sizes, iters, warmup, queue, only=None):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // np_))
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=np_)
    makers = {
        "resnet50": lambda: [torch.ones(n) for n in sizes],
        "resnet50-25MiB": lambda: [torch.ones(n) for n in buckets(sizes, 25 << 20)],
        "64MiB": lambda: [torch.ones(16 << 20)],
        "4MB": lambda: [torch.ones(1024 * 1000)],
        "4KiBx1000": lambda: [torch.ones(1024) for _ in range(1000)],
    }
    names = only or ["resnet50", "resnet50-25MiB", "64MiB"]
    result = {}
    for name in names:
        ts = makers[name]()
        times = []
        for i in range(warmup + iters):
            dist.barrier()
            t0 = time.perf_counter()
            for t in ts:
                dist.all_reduce(t)
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
        # the slowest rank per step
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        result[name] = (statistics.median(tt.tolist()), sum(4 * t.numel() for t in ts))
    if rank == 0 and queue is not None:
        queue.put(result)
    dist.destroy_process_group()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--rank", type=int, default=-1, help="run this one rank here (across nodes)")
    ap.add_argument("--master", default="", help="HOST:PORT of rank 0, with --rank")
    ap.add_argument("--cases", default="", help="comma-separated cases (default resnet50,resnet50-25MiB,64MiB)")
    a = ap.parse_args()
    sizes = shapes_of(a.shapes)
    only = [c for c in a.cases.split(",") if c] or None
    if a.rank >= 0:
        res = worker(a.rank, a.np, a.master, sizes, a.iters, a.warmup, None, only)
        if a.rank == 0:
            report(res, a.np)
        return
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.np, f"127.0.0.1:{a.port}", sizes, a.iters, a.warmup, q, only)) for r in range(a.np)]
    for p in procs:
        p.start()
    res = q.get()
    for p in procs:
        p.join()
    report(res, a.np)


def report(res, np_):
    for name, (sec, nbytes) in res.items():
        algbw = nbytes / sec / 1e9
        busbw = algbw * 2 * (np_ - 1) / np_
        print(f"transport=torch-gloo np={np_} case={name} bytes={nbytes} ms={sec * 1e3:.3f} algbw_GBps={algbw:.3f} busbw_GBps={busbw:.3f}", flush=True)


if __name__ == "__main__":
    main()
