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
