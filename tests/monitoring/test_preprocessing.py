"""What the platform templates' preprocessing computes from real exposition text, evaluated by a
REAL Zabbix 7.0 server.

Zabbix evaluates preprocessing only in the server process. The 7.0 JSON-RPC API has no
`item.test` method (asserted below): the UI's "Test" button goes through the frontend's controller
(popup.itemtest.send), which sends the request `item.test` with the user's session id to the
server's trapper (CZabbixServer::testItem), and the server's preprocessing workers run the steps.
These tests send that same request to a real `zabbix_server` 7.0 (Debian 13's build, run by
tests/monitoring/start-zabbix-api.sh against the frontend's database; see tests/monitoring/zabbix70.py).

The templates are imported through the real API first and every step is read back from it, so
what runs is what Zabbix stores. Nothing is evaluated in Python: LLD macros are substituted into
the step parameters as the frontend does before it sends them, and the discovery rules' LLD macro
paths are evaluated by the server too (as a JSONPath step over the rule's output).

The samples and the values the server must compute are in tests/monitoring/samples (expected.yaml).
The instance has no hosts and every poller is off: the server connects only to its database.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from zabbix_utils import ZabbixAPI

from components.monitoring.api import DEFAULT_ADMIN, DEFAULT_PASSWORD
from components.monitoring.config import template_sources
from components.monitoring.kinds import IMPORT_RULES
from tests.monitoring.zabbix70 import trapper_request, zabbix70

pytestmark = pytest.mark.real_server  # make test-fast leaves these out

SAMPLES = Path(__file__).resolve().parent / "samples"
EXPECTED = yaml.safe_load((SAMPLES / "expected.yaml").read_text())
_TEXT = 4  # value_type of the discovery rules' output
_JSONPATH = 12  # preprocessing step type


class PreprocessingError(Exception):
    """The server's own error for a step that failed."""


def _cases(section: str) -> list[tuple[str, str, float]]:
    """(sample, item key, value) of every sample's `items` or `rates` section."""
    out = []
    for sample, case in EXPECTED.items():
        values = case.get(section, {})
        out += [(sample, key, value) for key, value in values.get("items", values).items()]
    return out


@pytest.fixture(scope="module")
def zabbix():
    with zabbix70("server", with_server=True) as instance:
        yield instance


@pytest.fixture(scope="module")
def session(zabbix) -> str:
    """A frontend session id (what the UI's test sends as `sid`)."""
    return ZabbixAPI(url=zabbix.url).user.login(username=DEFAULT_ADMIN, password=DEFAULT_PASSWORD)


@pytest.fixture(scope="module")
def api(zabbix, session):
    api = ZabbixAPI(url=zabbix.url, token=session)
    for _, text in template_sources().values():
        api.configuration.import_(format="yaml", source=text, rules=IMPORT_RULES)
    return api


def item_test(zabbix, sid: str, value: str, value_type: int, steps: list[dict], previous=None) -> str:
    """The server's result for `steps` applied to `value`; `previous`: (value, seconds ago)."""
    options: dict = {"single": False, "state": 0}
    if previous:
        options["history"] = {"value": previous[0], "timestamp": f"now-{previous[1]}s"}
    item = {"value": value, "value_type": value_type, "steps": steps}
    reply = trapper_request(
        zabbix.server_port, {"request": "item.test", "data": {"options": options, "item": item}, "sid": sid}
    )
    assert reply.get("response") == "success", reply
    result = reply["data"]["preprocessing"]
    if "error" in result:
        raise PreprocessingError(result["error"])
    return result["result"]


def _substituted(text: str, macros: dict[str, str]) -> str:
    for macro, value in macros.items():
        text = text.replace(macro, value)
    return text


def _resolved(steps: list[dict], macros: dict[str, str]) -> list[dict]:
    """Steps as stored, LLD macros replaced by their values (the frontend does the same)."""
    fields = ("type", "error_handler", "error_handler_params")
    return [{k: step[k] for k in fields} | {"params": _substituted(step["params"], macros)} for step in steps]


def _template_id(api, sample: str) -> str:
    return api.template.get(filter={"host": EXPECTED[sample]["template"]}, output=["templateid"])[0]["templateid"]


def _master_input(api, sample: str, master_itemid: str) -> str:
    """The dependent items' input: the master's value, which is the exporter's text as fetched
    (the masters are HTTP agent items without preprocessing of their own)."""
    master = api.item.get(itemids=[master_itemid], output=["key_", "type"], selectPreprocessing="extend")[0]
    assert master["type"] == "19" and master["preprocessing"] == [], master
    return (SAMPLES / sample).read_text()


def discover(zabbix, session, api, sample: str, rule_key: str) -> list[dict[str, str]]:
    """The LLD rows the server makes of `sample` with the rule's steps and macro paths."""
    rule = api.discoveryrule.get(
        templateids=[_template_id(api, sample)],
        filter={"key_": rule_key},
        output=["key_", "master_itemid"],
        selectPreprocessing="extend",
        selectLLDMacroPaths="extend",
    )[0]
    text = _master_input(api, sample, rule["master_itemid"])
    columns = {}
    for path in rule["lld_macro_paths"]:
        assert path["path"].startswith("$."), path  # relative to one row: applied to every row below
        each_row = {
            "type": _JSONPATH,
            "params": "$[*]" + path["path"][1:],
            "error_handler": 0,
            "error_handler_params": "",
        }
        columns[path["lld_macro"]] = json.loads(
            item_test(zabbix, session, text, _TEXT, _resolved(rule["preprocessing"], {}) + [each_row])
        )
    counts = {len(values) for values in columns.values()}
    assert len(counts) == 1, columns
    return [{macro: values[i] for macro, values in columns.items()} for i in range(counts.pop())]


def _parsed_rows(rows: list[str]) -> list[dict[str, str]]:
    return [dict(pair.split("=", 1) for pair in row.split()) for row in rows]


def _item(zabbix, session, api, sample: str, key: str) -> tuple[dict, dict[str, str]]:
    """The template item with this key, or the prototype and LLD row that make it."""
    template = _template_id(api, sample)
    fields = {"output": ["key_", "value_type", "master_itemid"], "selectPreprocessing": "extend"}
    items = api.item.get(templateids=[template], filter={"key_": key}, **fields)
    if items:
        return items[0], {}
    prototypes = api.itemprototype.get(templateids=[template], selectDiscoveryRule=["key_"], **fields)
    for proto in prototypes:
        for row in discover(zabbix, session, api, sample, proto["discoveryRule"]["key_"]):
            if _substituted(proto["key_"], row) == key:
                return proto, row
    raise AssertionError(f"{sample}: no item or discovered prototype of {EXPECTED[sample]['template']} is {key}")


# ---------------------------------------------------------------------------------------------


def test_the_7_0_api_has_no_item_test_method(api):
    """Why the tests talk to the server's trapper: the API cannot test preprocessing in 7.0."""
    from zabbix_utils.exceptions import APIRequestError

    with pytest.raises(APIRequestError, match='Incorrect method "item.test"'):
        api.item.test(value="1", value_type=0, steps=[])


def test_the_server_refuses_an_item_test_without_a_session(zabbix, api):
    request = {
        "request": "item.test",
        "data": {"options": {}, "item": {"value": "1", "value_type": 0}},
        "sid": "0" * 32,
    }
    assert trapper_request(zabbix.server_port, request) == {"response": "failed", "info": "Permission denied."}


@pytest.mark.parametrize(
    ("sample", "rule_key"), [(s, k) for s, case in EXPECTED.items() for k in case.get("discovery", {})]
)
def test_discovery_finds_what_the_sample_has(sample, rule_key, zabbix, session, api):
    wanted = _parsed_rows(EXPECTED[sample]["discovery"][rule_key])
    rows = discover(zabbix, session, api, sample, rule_key)
    assert sorted(({m: r[m] for m in wanted[0]} for r in rows), key=str) == sorted(wanted, key=str)


@pytest.mark.parametrize(("sample", "key", "expected"), _cases("items"), ids=str)
def test_item_value_computed_by_the_server(sample, key, expected, zabbix, session, api):
    item, macros = _item(zabbix, session, api, sample, key)
    value = _master_input(api, sample, item["master_itemid"])
    result = item_test(zabbix, session, value, int(item["value_type"]), _resolved(item["preprocessing"], macros))
    assert float(result) == pytest.approx(expected, rel=1e-12), (key, result)


@pytest.mark.parametrize(("sample", "key", "expected"), _cases("rates"), ids=str)
def test_rate_computed_by_the_server_from_the_previous_sample(sample, key, expected, zabbix, session, api):
    rates = EXPECTED[sample]["rates"]
    item, macros = _item(zabbix, session, api, sample, key)
    value = _master_input(api, sample, item["master_itemid"])
    previous = ((SAMPLES / rates["previous"]).read_text(), rates["seconds"])
    steps = _resolved(item["preprocessing"], macros)
    assert float(item_test(zabbix, session, value, int(item["value_type"]), steps, previous)) == pytest.approx(expected)


def test_a_gpu_the_exporter_does_not_report_is_an_error_from_the_server(zabbix, session, api):
    """The server really evaluates the pattern: a GPU index the sample lacks has no value."""
    item, _ = _item(zabbix, session, api, "dcgm-exporter.prom", "dcgm.gpu.temp[1]")
    value = _master_input(api, "dcgm-exporter.prom", item["master_itemid"])
    with pytest.raises(PreprocessingError, match="no matching metrics found"):
        item_test(zabbix, session, value, int(item["value_type"]), _resolved(item["preprocessing"], {"{#GPU}": "7"}))
