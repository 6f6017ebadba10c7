"""Stubbed disk tools for the host scripts that format and mount local disks (tier-1 NVMe, the NAS drives).

A device NAME is files in $STUB_STATE: NAME.disk (the device exists), NAME.sig (its signatures, as
`blkid -p -o export` prints them), NAME.mounts (its mount points). Each call that changes a disk or
a mount appends its command line to $STUB_STATE/log (the probes, blkid and lsblk, do not).
"""

from __future__ import annotations

import stat
from pathlib import Path

DISK_STUBS = {
    # blkid -p -o export DEV: the device's recorded signatures; exit 2 when there are none.
    "blkid": """
dev=${!#}; f="$STUB_STATE/$(basename "$dev")"
[[ -s $f.sig ]] || exit 2
cat "$f.sig"
""",
    # lsblk -dn -o TYPE DEV | lsblk -n -o MOUNTPOINT DEV
    "lsblk": """
dev=${!#}; f="$STUB_STATE/$(basename "$dev")"
[[ -e $f.disk ]] || { echo "lsblk: $dev: not a block device" >&2; exit 32; }
case "$*" in
  *TYPE*) echo disk ;;
  *MOUNTPOINT*) [[ -e $f.mounts ]] && cat "$f.mounts"; true ;;
esac
""",
    "wipefs": """
dev=${!#}; echo "wipefs $*" >>"$STUB_STATE/log"; rm -f "$STUB_STATE/$(basename "$dev").sig"
""",
    "mkfs.xfs": """
dev=${!#}; name=$(basename "$dev"); echo "mkfs.xfs $*" >>"$STUB_STATE/log"
[[ -s $STUB_STATE/$name.sig ]] && { echo "mkfs.xfs: $dev appears to contain an existing filesystem" >&2; exit 1; }
printf 'TYPE=xfs\\nUUID=uuid-%s\\nLABEL=%s\\n' "$name" "$3" >"$STUB_STATE/$name.sig"
""",
    # mount -t TYPE -o OPTS DEV DIR
    "mount": """
echo "mount $*" >>"$STUB_STATE/log"; dev=${*: -2:1}; echo "${!#}" >>"$STUB_STATE/$(basename "$dev").mounts"
""",
}


def install(bin_dir: Path, stubs: dict[str, str]) -> None:
    """Each stub as an executable bash script `bin_dir/<name>`."""
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text("#!/usr/bin/env bash\nset -euo pipefail\n" + body)
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
