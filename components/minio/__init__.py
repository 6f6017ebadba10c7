"""MinioTier (`tier.py`): MinIO on the NAS hosts (tier 3, `scripts/minio-nas.sh`), its buckets, users and
policies as tracked state (`objects.py`), and the CephFS backups to it (`backup.py`, the backup container's
script `container/cephfs-backup.sh`)."""
