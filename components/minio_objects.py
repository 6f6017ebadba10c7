"""Where deployed stacks find the MinIO providers: their state names this module (pickled by reference).

The code lives in `components/minio/objects.py`; this name must stay importable for as long as a
stack's state may refer to it.
"""

from components.minio.objects import BucketProvider, UserProvider

__all__ = ["BucketProvider", "UserProvider"]
