"""The Zabbix 7.0 API client the dynamic providers use: connections, logins, the Admin bootstrap
session, and name <-> id look-ups. Every call builds its own `ZabbixAPI` (it holds a socket and
cannot be pickled into a provider)."""

from __future__ import annotations

import time
from typing import Any, Optional

DEFAULT_ADMIN, DEFAULT_PASSWORD = "Admin", "zabbix"


def _tls(ca_pem: Optional[str]) -> dict[str, Any]:
    """How the client checks the server: against `ca_pem` when given (the web UI's own CA), else the
    system's trust store; certificates are always verified (plain http only when the URL says so)."""
    if not ca_pem:
        return {}
    import ssl

    return {"ssl_context": ssl.create_default_context(cadata=ca_pem)}


def connect(url: str, token: str, ca_pem: Optional[str] = None) -> Any:
    """A logged-in `ZabbixAPI`. Built per call, never stored on the provider (it cannot be pickled)."""
    from zabbix_utils import ZabbixAPI

    return ZabbixAPI(url=url, token=token, **_tls(ca_pem))


def first(rows: list[dict], key: str) -> Optional[str]:
    return rows[0][key] if rows else None


def ids_of(api: Any, method: str, key: str, field: str, names: list[str]) -> list[str]:
    """Zabbix ids of the objects named `names`; fails naming the ones that do not exist."""
    rows = getattr(api, method).get(filter={field: names}, output=[key, field])
    found = {r[field]: r[key] for r in rows}
    missing = sorted(set(names) - set(found))
    if missing:
        raise ValueError(f"{method} {missing} do not exist in Zabbix")
    return [found[n] for n in names]


def names_of(api: Any, method: str, key: str, field: str, ids: list[str]) -> list[str]:
    rows = getattr(api, method).get(**{f"{key}s": ids}, output=[field]) if ids else []
    return sorted(r[field] for r in rows)


def login(url: str, user: str, password: str, ca_pem: Optional[str] = None) -> Any:
    from zabbix_utils import ZabbixAPI

    api = ZabbixAPI(url=url, **_tls(ca_pem))
    api.login(user=user, password=password)
    return api


def wait_for_api(url: str, timeout_seconds: int, ca_pem: Optional[str] = None) -> None:
    """The web pod answers some time after the Helm release is ready (DB schema on first start)."""
    from zabbix_utils import ZabbixAPI

    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            ZabbixAPI(url=url, **_tls(ca_pem))
            return
        except Exception:  # noqa: BLE001 (any connection error means: not up yet)
            if time.monotonic() > deadline:
                raise
            time.sleep(5)


def admin_session(
    url: str, admin_password: str, previous_password: Optional[str] = None, ca_pem: Optional[str] = None
) -> Any:
    """Logs in as Admin with the declared password. If Admin still has `previous_password` (a
    rotation: the one in the state) or the chart's default (first run), changes it to the declared
    one first: 7.0 requires `current_passwd` when a user changes their own password."""
    from zabbix_utils.exceptions import APIRequestError

    candidates = [p for p in (previous_password, DEFAULT_PASSWORD) if p and p != admin_password]
    for current in [admin_password, *candidates]:
        try:
            api = login(url, DEFAULT_ADMIN, current, ca_pem)
        except APIRequestError:  # wrong password: try the next one
            continue
        if current != admin_password:
            userid = api.user.get(filter={"username": DEFAULT_ADMIN}, output=["userid"])[0]["userid"]
            api.user.update(userid=userid, passwd=admin_password, current_passwd=current)
            api = login(url, DEFAULT_ADMIN, admin_password, ca_pem)
        return api
    raise ValueError(
        f"cannot log in to {url} as {DEFAULT_ADMIN} with the declared password, the previous one or the "
        "chart's default; if the API user and the Admin password changed together, change one per `pulumi up`"
    )
