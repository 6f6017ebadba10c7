"""NCCL all-reduce bandwidth through torch.distributed (started by torchrun), printed the way nccl-tests'
all_reduce_perf prints it: a row per message size with algorithm and bus bandwidth, then
`# Avg bus bandwidth : <GB/s>`. Bus bandwidth = algorithm bandwidth x 2(n-1)/n, nccl-tests' formula
for all-reduce (doc/PERFORMANCE.md), so the figure compares with nccl-tests' and with the link rate.
Argument: the largest message (e.g. 1G); sizes double from 8M up to it."""

import os
import sys
import time

import torch
import torch.distributed as dist

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def main() -> None:
    largest = int(sys.argv[1][:-1]) * UNITS[sys.argv[1][-1]]
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    nodes: list = [None] * world
    dist.all_gather_object(nodes, os.environ.get("NODE", "?"))
    factor = 2 * (world - 1) / world
    if rank == 0:
        print(f"# Nodes : {','.join(sorted(set(nodes)))}")
        print("#       size    algbw(GB/s)  busbw(GB/s)")
    sizes, busbws = [], []
    size = 8 << 20
    while size <= largest:
        sizes.append(size)
        size *= 2
    for size in sizes:
        data = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        for _ in range(5):  # warm-up, as nccl-tests does
            dist.all_reduce(data)
        torch.cuda.synchronize()
        start, iterations = time.perf_counter(), 20
        for _ in range(iterations):
            dist.all_reduce(data)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iterations
        algbw = size / seconds / 1e9
        busbws.append(algbw * factor)
        if rank == 0:
            print(f"{size:12d} {algbw:14.2f} {algbw * factor:12.2f}")
    if rank == 0:
        print(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
