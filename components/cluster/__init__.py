"""The cluster itself: RKE2 on every node over SSH (`bootstrap.py`, the values it renders in `config.py`),
RKE2 upgrades through the system-upgrade-controller (`upgrades.py`, its vendored `manifests/` and `crds/`),
and the host scripts both send (`scripts/`)."""
