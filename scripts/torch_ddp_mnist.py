#!/usr/bin/env python3
"""torch DDP (gloo) on the MLP of examples/mnist, for the scaling comparison
in docs/BENCHMARKS.md: the same widths (784-256-128-10), batch per rank, SGD with
momentum and weight decay, the same MNIST files.

Each rank gets cores/np intra-op threads (at least one), as cmd/scalebench
gives each Go rank its share of the cores. Prints, per epoch, the samples/s
of all ranks together (rank 0's wall time over the epoch's global samples),
the first epoch paying for start-up as in the Go example.

Usage: torch_ddp_mnist.py --np 4 --data DIR [--epochs 2] [--batch 64]
"""
import argparse
import gzip
import os
import time


def idx(path):
    """An IDX file's unsigned bytes as a uint8 tensor of its dimensions."""
    import torch

    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def worker(rank, a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // a.np))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.np)
    x = idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).reshape(-1, 784).float() / 255.0
    y = idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).long()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr * a.np, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    n = x.shape[0]
    steps = n // (a.batch * a.np)
    g = torch.Generator().manual_seed(1)
    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(n, generator=g)
        dist.barrier()
        start = time.perf_counter()
        for s in range(steps):
            i = perm[(s * a.np + rank) * a.batch:(s * a.np + rank + 1) * a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x[i]), y[i])
            loss.backward()
            opt.step()
        dist.barrier()
        secs = time.perf_counter() - start
        if rank == 0:
            print(f"torch epoch {epoch}: np={a.np} threads/rank={torch.get_num_threads()} loss {loss.item():.4f} "
                  f"{steps * a.batch * a.np / secs:.0f} samples/s", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--port", type=int, default=29531)
    a = ap.parse_args()
    import torch.multiprocessing as mp
    mp.get_context("spawn")
    mp.spawn(worker, args=(a,), nprocs=a.np, join=True)


if __name__ == "__main__":
    main()
