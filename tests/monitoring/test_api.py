"""The Zabbix dynamic provider and the platform templates against a REAL Zabbix 7.0 API.

`tests/monitoring/zabbix70.py` starts the 7.0 frontend API on loopback with `tests/monitoring/start-zabbix-api.sh`;
if a prerequisite is missing the tests FAIL with the script's message naming it: they never skip.
6.0 would not do as a test server: it silently accepts unknown fields (see the strictness test).
What the templates' preprocessing computes is asserted against the real 7.0 server in
tests/monitoring/test_preprocessing.py.
"""

from __future__ import annotations

import pytest
import yaml

from components.monitoring import api as zapi
from components.monitoring import kinds
from components.monitoring import objects as zbx
from components.monitoring.config import TEMPLATES, template_sources
from tests.monitoring.zabbix70 import zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

ADMIN_PASSWORD, API_PASSWORD = "Adm1n-test-passphrase-77", "Api-test-passphrase-91"


@pytest.fixture(scope="module")
def url():
    """A fresh Zabbix 7.0 API (new database each start) for this module; stopped afterwards."""
    with zabbix70("api") as instance:
        yield instance.url


@pytest.fixture(scope="module")
def bootstrap(url):
    props = {"url": url, "api_user": "ml-platform-api", "admin_password": ADMIN_PASSWORD, "api_password": API_PASSWORD}
    return zbx.BootstrapProvider().create({**props, "wait_seconds": 30})


@pytest.fixture(scope="module")
def connection(url, bootstrap):
    return {"url": url, "token": bootstrap.outs["token"]}


@pytest.fixture
def api(connection):
    return zapi.connect(connection["url"], connection["token"])


@pytest.fixture(scope="module")
def base_objects(connection):
    """What the other kinds refer to by name: two host groups, the platform templates."""
    provider = zbx.ZabbixObjectProvider()
    for group in ("ml-platform/gpu-nodes", "ml-platform/nas"):
        provider.create(_props("HostGroup", {"name": group}, connection))
    for names, text in template_sources().values():
        provider.create(_props("TemplateImport", {"templates": names, "source": text}, connection))


def _props(kind: str, spec: dict, connection: dict, secrets: dict | None = None) -> dict:
    """The inputs a resource of `kind` hands its provider (what `_ZabbixObject` builds)."""
    return {"kind": kind, "spec": kinds.normalized(kind, spec), "connection": connection, "secrets": secrets or {}}


# ---------------------------------------------------------------------------------------------
# The server is real 7.0, and the chart's default credentials do not survive the bootstrap
# ---------------------------------------------------------------------------------------------


def test_the_api_is_zabbix_7_0(api):
    assert str(api.api_version()).startswith("7.0.")


def test_bootstrap_replaces_the_default_admin_password(url, bootstrap):
    from zabbix_utils.exceptions import APIRequestError

    with pytest.raises(APIRequestError, match="Incorrect user name or password"):
        zapi.login(url, "Admin", "zabbix")
    assert zapi.login(url, "Admin", ADMIN_PASSWORD).user.get(output=["username"])


def test_bootstrap_token_belongs_to_the_api_user(connection, bootstrap):
    api = zapi.connect(connection["url"], connection["token"])
    me = api.user.get(userids=[bootstrap.id], output=["username"], selectRole=["name"])
    assert me == [{"userid": bootstrap.id, "username": "ml-platform-api", "role": {"name": "Super admin role"}}]


def test_guest_stays_disabled(api):
    guest = api.user.get(filter={"username": "guest"}, selectUsrgrps=["name"], output=["username"])
    assert "Disabled" in {g["name"] for g in guest[0]["usrgrps"]}


def test_bootstrap_runs_again_and_adopts_the_api_user(url, bootstrap, connection):
    """A second create (e.g. after the state was lost) adopts the user and issues a new token."""
    props = {"url": url, "api_user": "ml-platform-api", "admin_password": ADMIN_PASSWORD, "api_password": API_PASSWORD}
    again = zbx.BootstrapProvider().create(props)
    assert again.id == bootstrap.id
    assert zapi.connect(url, again.outs["token"]).user.get(userids=[again.id], output=["username"])
    assert zbx.BootstrapProvider().read(again.id, again.outs).id == again.id
    connection["token"] = again.outs["token"]  # the old token was replaced; the other tests go on with this one


def test_a_replace_could_not_rotate_the_admin_password(url, bootstrap):
    """What a replace would run first: `create` with only the new password, while Admin still has the
    old one. It fails with a clear message (and its old resource's `delete` would then have deleted
    the API user the new one adopts): hence rotation is an update."""
    props = {"url": url, "api_user": "ml-platform-api", "admin_password": "An0ther-passphrase-33",
             "api_password": API_PASSWORD, "wait_seconds": 5}  # fmt: skip
    with pytest.raises(ValueError, match="cannot log in .* as Admin with the declared password"):
        zbx.BootstrapProvider().create(props)


def test_rotating_the_admin_and_api_passwords_is_an_update_that_keeps_the_token(url, bootstrap, connection):
    provider = zbx.BootstrapProvider()
    olds = {**bootstrap.outs, "token": connection["token"]}
    news = {**olds, "admin_password": "R0tated-root-passphrase-12", "api_password": "R0tated-api-passphrase-34"}
    diff = provider.diff(bootstrap.id, olds, news)
    assert diff.changes and not diff.replaces
    assert provider.diff(bootstrap.id, olds, {**olds, "url": url + "?other"}).replaces == ["url"]

    updated = provider.update(bootstrap.id, olds, news)
    assert updated.outs["token"] == connection["token"] and updated.outs["userid"] == bootstrap.id
    assert zapi.login(url, "Admin", "R0tated-root-passphrase-12").user.get(userids=[bootstrap.id])
    assert zapi.login(url, "ml-platform-api", "R0tated-api-passphrase-34").user.get(userids=[bootstrap.id])
    from zabbix_utils.exceptions import APIRequestError

    for user, old in (("Admin", ADMIN_PASSWORD), ("ml-platform-api", API_PASSWORD)):
        with pytest.raises(APIRequestError, match="Incorrect user name or password"):
            zapi.login(url, user, old)
    # The objects' connection (the token in their state) still works after the rotation.
    assert zapi.connect(url, connection["token"]).user.get(userids=[bootstrap.id], output=["username"])
    # A second `up` with the same settings: no diff; an update run again (e.g. after a failed `up`
    # that had already changed the password) logs in with the new password and changes nothing.
    assert not provider.diff(bootstrap.id, updated.outs, news).changes
    assert provider.update(bootstrap.id, olds, news).outs["token"] == connection["token"]


# ---------------------------------------------------------------------------------------------
# Every kind: create, read (second apply = no change), adopt, update, delete
# ---------------------------------------------------------------------------------------------

KIND_CASES = {
    "HostGroup": ({"name": "ml-platform/test-group"}, {"name": "ml-platform/test-group-renamed"}, None),
    "GlobalMacro": (
        {"macro": "{$TEST.THRESHOLD}", "value": "85", "description": "test"},
        {"macro": "{$TEST.THRESHOLD}", "value": "90", "description": "test"},
        None,
    ),
    "Host": (
        {
            "host": "gpu-test-01",
            "ip": "10.99.0.1",
            "groups": ["ml-platform/gpu-nodes"],
            "templates": ["Linux by Zabbix agent active", "ml-platform GPU by DCGM exporter"],
            "tags": [{"tag": "role", "value": "gpu"}, {"tag": "gpu", "value": "H100"}],
        },
        {
            "host": "gpu-test-01",
            "ip": "10.99.0.2",
            "groups": ["ml-platform/gpu-nodes", "ml-platform/nas"],
            "templates": ["Linux by Zabbix agent active", "ml-platform InfiniBand by sysfs"],
            "tags": [{"tag": "role", "value": "gpu"}],
            "macros": [{"macro": "{$IB.DEVICE}", "value": "mlx5_1"}],
        },
        {"tls_psk_identity": "ml-platform-agent", "tls_psk": "ab" * 32},
    ),
    "UserGroup": (
        {"name": "alerts-test", "host_groups": ["ml-platform/gpu-nodes"]},
        {"name": "alerts-test", "host_groups": ["ml-platform/gpu-nodes", "ml-platform/nas"]},
        None,
    ),
}


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_kind_lifecycle(kind, connection, base_objects):
    declared, changed, secrets = KIND_CASES[kind]
    provider = zbx.ZabbixObjectProvider()
    props = _props(kind, declared, connection, secrets)

    created = provider.create(props)
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.id == created.id
    assert not provider.diff(created.id, refreshed.outs, props).changes, "a second apply would change something"

    adopted = provider.create(props)  # e.g. state lost, object still in Zabbix
    assert adopted.id == created.id

    new_props = _props(kind, changed, connection, secrets)
    assert provider.diff(created.id, refreshed.outs, new_props).changes
    updated = provider.update(created.id, refreshed.outs, new_props)
    after = provider.read(created.id, updated.outs)
    assert not provider.diff(created.id, after.outs, new_props).changes, after.outs["spec"]

    provider.delete(created.id, after.outs)
    assert provider.read(created.id, after.outs).id is None


def test_a_new_token_is_an_update_that_stores_it(connection, base_objects):
    """`refresh` and `delete` use the connection in the state: a stale token there would fail them."""
    from zabbix_utils.exceptions import APIRequestError

    provider = zbx.ZabbixObjectProvider()
    props = _props("HostGroup", {"name": "ml-platform/token-test"}, connection)
    created = provider.create(props)
    stale = {**created.outs, "connection": {**connection, "token": "0" * 64}}
    with pytest.raises(APIRequestError, match="Not authorized"):
        provider.read(created.id, stale)
    diff = provider.diff(created.id, stale, props)
    assert diff.changes and not diff.replaces
    updated = provider.update(created.id, stale, props)
    assert updated.outs["connection"] == connection
    assert provider.read(created.id, updated.outs).id == created.id
    provider.delete(created.id, updated.outs)


def test_alert_user_and_action_lifecycle(connection, base_objects):
    """User and Action need a user group and a media type; same life cycle as the other kinds."""
    provider = zbx.ZabbixObjectProvider()
    group = provider.create(_props("UserGroup", {"name": "alerts-ops", "host_groups": ["ml-platform/nas"]}, connection))
    cases = [
        (
            "User",
            {"username": "alerts-ops", "role": "User role", "group": "alerts-ops", "mediatype": "Slack",
             "send_to": "#ops", "severity": 56},
            {"username": "alerts-ops", "role": "User role", "group": "alerts-ops", "mediatype": "Mattermost",
             "send_to": "ml/#ops", "severity": 48},
        ),
        (
            "Action",
            {"name": "alerts-ops", "min_severity": 3, "host_groups": ["ml-platform/nas"], "user_group": "alerts-ops",
             "mediatype": "Slack"},
            {"name": "alerts-ops", "min_severity": 4, "host_groups": ["ml-platform/gpu-nodes", "ml-platform/nas"],
             "user_group": "alerts-ops", "mediatype": "Mattermost"},
        ),
    ]  # fmt: skip
    for kind, declared, changed in cases:
        props = _props(kind, declared, connection)
        created = provider.create(props)
        refreshed = provider.read(created.id, created.outs)
        assert not provider.diff(created.id, refreshed.outs, props).changes, (kind, refreshed.outs["spec"])
        assert provider.create(props).id == created.id
        new_props = _props(kind, changed, connection)
        updated = provider.update(created.id, refreshed.outs, new_props)
        after = provider.read(created.id, updated.outs)
        assert not provider.diff(created.id, after.outs, new_props).changes, (kind, after.outs["spec"])
    for kind, declared, _ in reversed(cases):
        found = kinds.KINDS[kind].find(zapi.connect(**connection), kinds.normalized(kind, declared), {})
        provider.delete(found, {"kind": kind, "connection": connection})
        assert kinds.KINDS[kind].read(zapi.connect(**connection), found) is None
    provider.delete(group.id, group.outs)


def test_secret_macro_value_is_written_but_never_read_back(connection, api):
    provider = zbx.ZabbixObjectProvider()
    props = _props("GlobalMacro", {"macro": "{$TEST.TOKEN}", "secret": True}, connection, {"value": "s3cr3t"})
    created = provider.create(props)
    row = api.usermacro.get(globalmacro=True, globalmacroids=[created.id], output="extend")[0]
    assert row["type"] == "1" and "s3cr3t" not in str(row)
    assert not provider.diff(created.id, provider.read(created.id, created.outs).outs, props).changes
    provider.delete(created.id, created.outs)


def test_removed_host_is_deleted_in_zabbix(connection, api, base_objects):
    provider = zbx.ZabbixObjectProvider()
    spec = {"host": "nas-test-09", "ip": "10.99.0.9", "groups": ["ml-platform/nas"], "templates": [], "tags": []}
    created = provider.create(_props("Host", spec, connection))
    provider.delete(created.id, created.outs)  # what `pulumi up` does for a host gone from the inventory
    assert api.host.get(filter={"host": "nas-test-09"}) == []


# ---------------------------------------------------------------------------------------------
# Templates, media types, strict validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", sorted(p.stem for p in TEMPLATES.glob("*.yaml")))
def test_template_yaml_imports_with_every_item(stem, connection, api, base_objects):
    names, text = template_sources()[stem]
    provider = zbx.ZabbixObjectProvider()
    created = provider.create(_props("TemplateImport", {"templates": names, "source": text}, connection))
    doc = yaml.safe_load(text)["zabbix_export"]["templates"][0]
    template = api.template.get(templateids=created.id.split(","), selectItems=["key_"], selectDiscoveries=["key_"])[0]
    assert sorted(i["key_"] for i in template["items"]) == sorted(i["key"] for i in doc.get("items", []))
    assert sorted(d["key_"] for d in template["discoveries"]) == sorted(
        d["key"] for d in doc.get("discovery_rules", [])
    )
    # Importing the same YAML again changes nothing and keeps the ids (a second `up`).
    assert provider.create(_props("TemplateImport", {"templates": names, "source": text}, connection)).id == created.id


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("Slack", {"slack_mode": "alarm"}),
        ("Mattermost", {"mattermost_url": "https://chat.example.internal", "send_mode": "alarm"}),
    ],
)
def test_preloaded_media_types_accept_our_parameters(name, parameters, connection, api):
    provider = zbx.ZabbixObjectProvider()
    props = _props("MediaType", {"name": name, "enabled": True, "parameters": parameters}, connection,
                   {"bot_token": "xoxb-test-token"})  # fmt: skip
    created = provider.create(props)
    row = api.mediatype.get(mediatypeids=[created.id], output=["status", "parameters"])[0]
    values = {p["name"]: p["value"] for p in row["parameters"]}
    assert row["status"] == "0"
    assert values["bot_token"] == "xoxb-test-token"
    assert {k: values[k] for k in parameters} == parameters
    assert not provider.diff(created.id, provider.read(created.id, created.outs).outs, props).changes
    provider.delete(created.id, created.outs)  # disabled, token blanked: the official object stays
    row = api.mediatype.get(mediatypeids=[created.id], output=["status", "parameters"])[0]
    assert row["status"] == "1" and {p["name"]: p["value"] for p in row["parameters"]}["bot_token"] == ""


def test_7_0_rejects_a_payload_with_an_unknown_field(api):
    from zabbix_utils.exceptions import APIRequestError

    with pytest.raises(APIRequestError, match='unexpected parameter "bogus_field"'):
        api.hostgroup.create(name="ml-platform/strict", bogus_field=1)
    with pytest.raises(APIRequestError, match='unexpected parameter "bogus_field"'):
        api.usermacro.createglobal(macro="{$STRICT}", value="1", bogus_field=1)
