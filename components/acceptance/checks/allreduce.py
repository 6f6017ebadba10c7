"""NCCL all-reduce bandwidth and correctness through torch.distributed (started by torchrun), printed the way
nccl-tests' all_reduce_perf prints it (src/common.cu): a row per message size with time, algorithm and bus
bandwidth and `#wrong`, then `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth : <GB/s>`, plus
`# Plateau bus bandwidth : <GB/s>`, the mean over the messages of at least PLATEAU bytes, where the bandwidth
no longer grows with the size (the floor is compared with it; small messages are latency-bound).
Bus bandwidth = algorithm bandwidth x 2(n-1)/n, nccl-tests' formula for all-reduce (doc/PERFORMANCE.md).
Correctness: rank r fills its buffer with r+1; after the sum every element must be n(n+1)/2 (exact in float32
for any realistic n); the elements that differ are counted per size, as nccl-tests' `#wrong` column.
Arguments: the largest message (e.g. 1G) and the plateau's first size (e.g. 256M); sizes double from 8M."""

import os
import sys
import time

import torch
import torch.distributed as dist

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_bytes(text: str) -> int:
    return int(text[:-1]) * UNITS[text[-1]]


def main() -> None:
    largest, plateau = size_bytes(sys.argv[1]), size_bytes(sys.argv[2])
    warmup, iterations = int(os.environ.get("WARMUP", "5")), int(os.environ.get("ITERATIONS", "20"))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    nodes: list = [None] * world
    dist.all_gather_object(nodes, os.environ.get("NODE", "?"))
    factor = 2 * (world - 1) / world
    expected = world * (world + 1) / 2
    if rank == 0:
        print(f"# Nodes : {','.join(sorted(set(nodes)))}")
        print(f"# Ranks : {world}")
        print("#       size      time(us)  algbw(GB/s)  busbw(GB/s)  #wrong")
    sizes, rows, wrong_total, checked = [], [], 0, 0
    size = 8 << 20
    while size <= largest:
        sizes.append(size)
        size *= 2
    for size in sizes:
        data = torch.full((size // 4,), float(rank + 1), dtype=torch.float32, device="cuda")
        dist.all_reduce(data)
        wrong = torch.count_nonzero(data != expected)
        dist.all_reduce(wrong)  # every rank's wrong elements
        wrong_count = int(wrong.item())
        wrong_total += wrong_count
        checked += (size // 4) * world
        for _ in range(warmup):  # as nccl-tests does
            dist.all_reduce(data)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(data)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iterations
        algbw = size / seconds / 1e9
        rows.append((size, algbw * factor))
        if rank == 0:
            print(f"{size:12d} {seconds * 1e6:13.1f} {algbw:12.2f} {algbw * factor:12.2f} {wrong_count:7d}")
    if rank == 0:
        busbws = [b for _, b in rows]
        top = [b for s, b in rows if s >= plateau] or busbws[-1:]
        print(f"# Elements checked : {checked}")
        print(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
        print(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.3f}")
        print(f"# Plateau bus bandwidth : {sum(top) / len(top):.3f} ({len(top)} sizes from {min(plateau, largest)} B)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
