"""NetworkFabric (`fabric.py`): the CNI, the NVIDIA Network Operator, InfiniBand/RDMA; the host script it
sends (`scripts/infiniband-host.sh`) and the nv-ipam CRD it installs first (`crds/`)."""
