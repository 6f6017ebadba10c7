"""GpuPool (`pool.py`): the GPU Operator, time-slicing, tier-1 local NVMe; the host script it sends
(`scripts/nvme-tier1.sh`) and the DCGM exporter's metric list (`dcgm-metrics.csv`)."""
