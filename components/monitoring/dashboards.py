"""The platform's Zabbix dashboards, declared as the 7.0 API stores them (`DashboardKind` in
`components/monitoring/kinds.py` resolves the host group and host names to ids).

Every widget points at what the platform's own templates create, by item name pattern (the names
of discovered items, e.g. "GPU 0: utilization" from the prototype "GPU {#GPU}: utilization"), by
host group or host tag, and names no node: a node added to the inventory shows up without a change
to the dashboards (the plan of a new node adds only that node's resources). An SVG graph draws at
most 50 items (SVG_GRAPH_MAX_NUMBER_OF_METRICS): the per-node GPU graphs show 50 GPU nodes and the
InfiniBand graph 25 ports (received and transmitted); the honeycombs show every node or port.

Widget types and field names are the 7.0 frontend's (ui/widgets/*/includes/WidgetForm.php and
CWidgetFieldDataSet.php in the 7.0 source): `svggraph` (data sets `ds.N.hosts.M`, `ds.N.items.M`
patterns), `honeycomb` (`groupids.N`/`hostids.N`, item patterns `items.N`), `problems` (`groupids.N`).

The team view here shows the GPUs of the nodes the team's quota lives on (its GPU flavors), beside
the team's quota there; a team's own queue, quota use and the GPUs its pods hold are on the queue
dashboards (`queue_dashboards.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from components.monitoring.api import first, ids_of
from settings import NodeSettings
from settings.monitoring import HOST_GROUPS
from settings.scheduling import Team, gpu_flavor_name

OVERVIEW = "ml-platform: platform overview"
TEAMS = "ml-platform: GPUs by team quota"
WIDTH = 72  # the 7.0 dashboard grid is 72 columns wide (DASHBOARD_MAX_COLUMNS)

# Widget field types (7.0 API: dashboard widget field object)
INT, STR, GROUP, HOST = 0, 1, 2, 3
# svggraph data set values (7.0 frontend defines)
_AXIS_RIGHT, _TAG_EQUAL = 1, 1
# Colors of the 7.0 data set palette (CWidgetFieldDataSet::DEFAULT_COLOR_PALETTE)
PALETTE = ["FF465C", "FFD54F", "0EC9AC", "524BBC", "ED1248", "D1E754", "2AB5FF", "385CC7", "EC1594", "BAE37D"]
_RED, _GREEN = "E45959", "59DB8F"


def dashboard_references(spec: dict) -> set[str]:
    """The host groups and hosts a dashboard's widgets name (their ids are looked up at apply time;
    the graphs' data sets match host names by pattern and reference nothing)."""
    fields = [f for page in spec["pages"] for w in page["widgets"] for f in w["fields"]]
    return {f["value"] for f in fields if f["type"] in (GROUP, HOST)}


def widget(kind: str, name: str, x: int, y: int, width: int, height: int, fields: list[tuple[int, str, Any]]) -> dict:
    return {
        "type": kind,
        "name": name,
        "x": x,
        "y": y,
        "width": width,
        "height": height,
        "view_mode": 0,
        "fields": [{"type": t, "name": n, "value": v} for t, n, v in fields],
    }


def data_set(index: int, hosts: Sequence[str], items: Sequence[str], **options: Any) -> list[tuple[int, str, Any]]:
    """One svggraph data set: host and item name patterns, a palette color, and non-default options
    (aggregate_function, aggregate_grouping, aggregate_interval, axisy, data_set_label)."""
    fields: list[tuple[int, str, Any]] = [(STR, f"ds.{index}.hosts.{i}", h) for i, h in enumerate(hosts)]
    fields += [(STR, f"ds.{index}.items.{i}", pattern) for i, pattern in enumerate(items)]
    fields.append((STR, f"ds.{index}.color", PALETTE[index % len(PALETTE)]))
    for key, value in options.items():
        fields.append((STR if isinstance(value, str) else INT, f"ds.{index}.{key}", value))
    return fields


def honeycomb(
    name: str,
    x: int,
    y: int,
    width: int,
    height: int,
    items: Sequence[str],
    groups: Sequence[str] = (),
    hosts: Sequence[str] = (),
    alarm_at: Optional[str] = None,
    host_tag: Optional[tuple[str, str]] = None,
) -> dict:
    """A cell per matching item of the hosts (or host groups, optionally only hosts with the tag
    `host_tag` = (tag, value)), its last value as label; with `alarm_at`, green below and red from
    that value."""
    fields: list[tuple[int, str, Any]] = [(GROUP, f"groupids.{i}", g) for i, g in enumerate(groups)]
    fields += [(HOST, f"hostids.{i}", h) for i, h in enumerate(hosts)]
    fields += [(STR, f"items.{i}", pattern) for i, pattern in enumerate(items)]
    if host_tag:
        fields += [(STR, "host_tags.0.tag", host_tag[0]), (INT, "host_tags.0.operator", _TAG_EQUAL)]
        fields.append((STR, "host_tags.0.value", host_tag[1]))
    fields.append((STR, "primary_label", "{HOST.NAME}\n{ITEM.NAME}"))  # default: the host name only
    if alarm_at is not None:
        fields += [
            (STR, "thresholds.0.color", _GREEN),
            (STR, "thresholds.0.threshold", "0"),
            (STR, "thresholds.1.color", _RED),
            (STR, "thresholds.1.threshold", alarm_at),
        ]
    return widget("honeycomb", name, x, y, width, height, fields)


def overview_dashboard(
    nodes: Sequence[NodeSettings], has_nas: bool, kubernetes_host: str, ceph_host: Optional[str]
) -> dict:
    """GPUs per node, Ceph health and I/O, InfiniBand throughput and errors, MinIO, backup age, and
    every open problem of the platform's host groups."""
    widgets = [
        widget("problems", "Problems", 0, 0, 48, 6, [(GROUP, f"groupids.{i}", g) for i, g in enumerate(HOST_GROUPS)]),
        honeycomb(
            "Backup age and newest etcd snapshot",
            48,
            0,
            24,
            6,
            ["Backup *: age", "etcd: newest snapshot"],
            hosts=[kubernetes_host],
        ),
    ]
    y = 6
    if any(n.role == "gpu" for n in nodes):
        widgets += [
            widget(
                "svggraph",
                "GPU utilisation per node (average of its GPUs)",
                0,
                y,
                36,
                6,
                data_set(0, ["*"], ["GPUs: average utilization"]),
            ),
            widget(
                "svggraph",
                "GPU memory used per node (all its GPUs)",
                36,
                y,
                36,
                6,
                data_set(0, ["*"], ["GPUs: memory used"]),
            ),
        ]
        y += 6
    if ceph_host:
        io = data_set(0, [ceph_host], ["Ceph: read bytes/s", "Ceph: write bytes/s"])
        io += data_set(1, [ceph_host], ["Ceph: read operations/s", "Ceph: write operations/s"], axisy=_AXIS_RIGHT)
        widgets += [
            honeycomb(
                "Ceph health (0 OK, 1 WARN, 2 ERR), OSDs, pools",
                0,
                y,
                24,
                6,
                ["Ceph: health status", "Ceph: OSDs up", "Pool *: used"],
                hosts=[ceph_host],
            ),
            widget("svggraph", "Ceph I/O (bytes/s left, operations/s right)", 24, y, 48, 6, io),
        ]
        y += 6
    if any(n.infiniband for n in nodes):
        throughput = data_set(0, ["*"], ["IB *: received bytes/s"]) + data_set(1, ["*"], ["IB *: transmitted bytes/s"])
        widgets += [
            widget("svggraph", "InfiniBand throughput per port (received, transmitted)", 0, y, 36, 6, throughput),
            honeycomb(
                "InfiniBand port errors and link-down events",
                36,
                y,
                36,
                6,
                ["IB *: symbol errors", "IB *: receive errors", "IB *: link down events"],
                groups=["ml-platform/gpu-nodes"],
                alarm_at="1",
            ),
        ]
        y += 6
    if has_nas:
        widgets.append(
            honeycomb(
                "MinIO: drives offline, capacity, health",
                0,
                y,
                WIDTH,
                5,
                [
                    "MinIO: drives offline",
                    "MinIO: usable capacity free",
                    "MinIO: liveness (HTTP status)",
                    "MinIO: cluster write quorum (HTTP status)",
                ],
                groups=["ml-platform/nas"],
            )
        )
    return {
        "name": OVERVIEW,
        "display_period": 30,
        "auto_start": 1,
        "pages": [{"name": "Platform", "widgets": widgets}],
    }


def teams_dashboard(teams: Sequence[Team], nodes: Sequence[NodeSettings]) -> Optional[dict]:
    """A page per team with a GPU quota: for each GPU flavor it has quota on, the utilisation of every
    GPU on that flavor's nodes (the GPU nodes whose `gpu` tag is the model). None without such a team."""
    models = {gpu_flavor_name(n.gpu.model): n.gpu.model for n in nodes if n.gpu}
    pages = []
    for team in teams:
        widgets = [
            honeycomb(
                f"{flavor}: utilisation of every GPU (team quota {quota.gpus} GPUs)",
                0,
                6 * i,
                WIDTH,
                6,
                ["GPU *: utilization"],
                groups=["ml-platform/gpu-nodes"],
                host_tag=("gpu", models[flavor]),
            )
            for i, (flavor, quota) in enumerate(
                sorted((f, q) for f, q in team.quotas.items() if q.gpus and f in models)
            )
        ]
        if widgets:
            pages.append({"name": f"Team {team.name}", "widgets": widgets})
    if not pages:
        return None
    return {"name": TEAMS, "display_period": 30, "auto_start": 1, "pages": pages}


# Zabbix API enums (7.0 API reference).
_FIELD_INT, _FIELD_GROUP, _FIELD_HOST = 0, 2, 3  # widget field types whose value is a host group / host id
_PUBLIC = 0  # dashboard sharing: public
_WIDGET_INTS = ("x", "y", "width", "height", "view_mode")


class DashboardKind:
    """A dashboard, public (every user who may read the hosts sees it). Widget fields are declared
    as the 7.0 API stores them (`{type, name, value}`), except that host group (type 2) and host
    (type 3) fields name the group or host: their ids are looked up at apply time and turned back
    into names by `read`, so a dashboard edited in the UI (a widget moved, added or re-pointed)
    reads back different from the declaration and shows as drift."""

    _REF_KINDS = {_FIELD_GROUP: ("hostgroup", "groupid", "name"), _FIELD_HOST: ("host", "hostid", "host")}

    def find(self, api, spec, secrets):
        return first(api.dashboard.get(filter={"name": spec["name"]}, output=["dashboardid"]), "dashboardid")

    def _payload(self, api, spec):
        refs = {t: {} for t in self._REF_KINDS}
        for page in spec["pages"]:
            for widget in page["widgets"]:
                for field in widget["fields"]:
                    if field["type"] in refs:
                        refs[field["type"]][field["value"]] = None
        for type_, names in refs.items():
            if names:
                method, key, name_field = self._REF_KINDS[type_]
                refs[type_] = dict(zip(names, ids_of(api, method, key, name_field, list(names)), strict=True))
        pages = [
            {
                "name": page["name"],
                "widgets": [
                    {
                        **{k: v for k, v in widget.items() if k != "fields"},
                        "fields": [{**f, "value": _api_value(f, refs)} for f in widget["fields"]],
                    }
                    for widget in page["widgets"]
                ],
            }
            for page in spec["pages"]
        ]
        return {
            "name": spec["name"],
            "display_period": spec["display_period"],
            "auto_start": spec["auto_start"],
            "private": _PUBLIC,
            "pages": pages,
        }

    def create(self, api, spec, secrets):
        return api.dashboard.create(**self._payload(api, spec))["dashboardids"][0]

    def update(self, api, id_, spec, secrets):
        # The pages given replace the dashboard's pages and widgets entirely.
        api.dashboard.update(dashboardid=id_, **self._payload(api, spec))

    def read(self, api, id_):
        rows = api.dashboard.get(dashboardids=[id_], output="extend", selectPages="extend")
        if not rows:
            return None
        row = rows[0]
        names = {}
        for type_, (method, key, name_field) in self._REF_KINDS.items():
            ids = {
                f["value"] for p in row["pages"] for w in p["widgets"] for f in w["fields"] if int(f["type"]) == type_
            }
            rows_ = getattr(api, method).get(**{f"{key}s": sorted(ids)}, output=[key, name_field]) if ids else []
            names[type_] = {r[key]: r[name_field] for r in rows_}
        spec = {
            "name": row["name"],
            "display_period": int(row["display_period"]),
            "auto_start": int(row["auto_start"]),
            "pages": [
                {
                    "name": p["name"],
                    "widgets": [
                        {
                            "type": w["type"],
                            "name": w["name"],
                            **{k: int(w[k]) for k in _WIDGET_INTS},
                            "fields": [
                                {
                                    "type": int(f["type"]),
                                    "name": f["name"],
                                    # an id whose object is gone reads as "#<id>": drift, never equal
                                    "value": names[int(f["type"])].get(f["value"], f"#{f['value']}")
                                    if int(f["type"]) in names
                                    else f["value"],
                                }
                                for f in w["fields"]
                            ],
                        }
                        for w in p["widgets"]
                    ],
                }
                for p in row["pages"]
            ],
        }
        if row["private"] != str(_PUBLIC):
            spec["private"] = True
        return normalized_dashboard(spec)

    def delete(self, api, id_):
        api.dashboard.delete(id_)


def _api_value(field: dict, refs: dict[int, dict[str, str]]) -> Any:
    """A widget field's value as the API takes it: an id for a named group or host, an int for type 0."""
    if field["type"] in refs:
        return refs[field["type"]][field["value"]]
    return int(field["value"]) if field["type"] == _FIELD_INT else field["value"]


def widgets_in_order(widgets: list[dict]) -> list[dict]:
    """Widgets in reading order, their fields sorted by name with string values (as the API returns them)."""
    out = [
        {
            **w,
            "fields": sorted(({**f, "value": str(f["value"])} for f in w["fields"]), key=lambda f: f["name"]),
        }
        for w in widgets
    ]
    return sorted(out, key=lambda w: (w["y"], w["x"]))


def normalized_dashboard(spec: dict) -> dict:
    """A dashboard spec in the order `read` returns it: widgets in reading order, fields sorted."""
    return {**spec, "pages": [{**page, "widgets": widgets_in_order(page["widgets"])} for page in spec["pages"]]}
