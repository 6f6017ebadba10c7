"""Booted Debian 12 machines reached over real SSH: the host harness of `tests/test_hosts*.py`,
and `staged_bundle`, the host scripts as a host holds them for tests that run a step's command locally.

`rootfs` builds and caches the machines' root file system, `machines` starts and stops the machines,
their network and the relay to the Debian mirror, `standins` declares what stands in for hardware and
release files that cannot be had here, `artifacts` serves the release files the stack's air-gap settings
point at (with `nas`: the MinIO stand-in, a signed apt repository of zabbix-agent2, the NAS steps'
generated secrets), `inventory` writes the stack file and its plan, `runner` sends
the plan's host steps over SSH through the bastion, and `probe` takes a host's fingerprint.
"""


def staged_bundle(home):
    """`home` as a host's SSH user home after its `-scripts` step: the bundle of host scripts copied to
    ~/.ml-platform/host-scripts/ (components/hosts/delivery.py). Returns `home`."""
    import shutil
    from pathlib import Path

    from components.hosts import delivery

    sha, path = delivery.bundle()
    target = Path(home) / delivery.STAGED / f"{sha}.tar"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, target)
    return Path(home)
