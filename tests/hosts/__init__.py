"""Booted Debian 12 machines reached over real SSH: the host harness of `tests/test_hosts*.py`.

`rootfs` builds and caches the machines' root file system, `machines` starts and stops the machines,
their network and the relay to the Debian mirror, `standins` declares what stands in for hardware and
release files that cannot be had here, `inventory` writes the stack file and its plan, `runner` sends
the plan's host steps over SSH through the bastion, and `probe` takes a host's fingerprint.
"""
