"""CephTier (`tier.py`): Rook-Ceph, its pools and storage classes (tier 2); the host script that checks each
storage host's OSD disks (`scripts/ceph-osd-devices.sh`)."""
