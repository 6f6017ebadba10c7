"""The queue monitoring as the program declares it (mock engine): the <cluster>-kueue host, the
read-only identity Zabbix scrapes Kueue with and its secret token, the Kueue setting the metrics need,
the thresholds, team channels, and bad settings."""

from __future__ import annotations

import re

import yaml

from components.monitoring.config import channel_specs
from components.monitoring.queues import METRICS_PORT, METRICS_SERVICE, READER, READER_RULES, READER_TOKEN
from settings import load
from tests.conftest import problems, requires_upstream, stack_doc

PREFIX = "pulumi-python:dynamic/zabbix:"


def _host(plan, host: str) -> dict:
    (found,) = [r for r in plan.by_type(f"{PREFIX}Host") if r["inputs"]["spec"]["host"] == host]
    return found


def test_the_kueue_host_scrapes_kueues_metrics_service_with_a_secret_token(prod_plan):
    host = _host(prod_plan, "ml-prod-kueue")
    spec = host["inputs"]["spec"]
    assert spec["templates"] == ["ml-platform Kueue ClusterQueues by HTTP", "ml-platform Kueue queue details by HTTP"]
    assert spec["groups"] == ["ml-platform/kubernetes"]
    url = "https://kueue-controller-manager-metrics-service.kueue-system.svc:8443/metrics"
    assert spec["macros"] == [{"macro": "{$KUEUE.METRICS.URL}", "value": url}]
    assert host["inputs"]["secrets"] == "[secret]"  # {$KUEUE.TOKEN}, a secret host macro
    assert "KUEUE.TOKEN" not in str(spec)


def test_the_read_only_identity_may_read_metrics_and_queues_and_nothing_else(prod_plan):
    role = prod_plan.named("monitoring-kueue-reader-role")["inputs"]
    assert role["rules"] == READER_RULES
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list"}
    binding = prod_plan.named("monitoring-kueue-reader-binding")["inputs"]
    assert binding["roleRef"]["name"] == READER
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": READER, "namespace": "monitoring"}]
    token = prod_plan.named("monitoring-kueue-reader-token")["inputs"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"] == {
        "name": READER_TOKEN,
        "namespace": "monitoring",
        "annotations": {"kubernetes.io/service-account.name": READER},
    }
    # The program reads the token back (not a new object), and only after the Secret exists.
    (read,) = [r for r in prod_plan.reads if r["name"] == "monitoring-kueue-reader-token-read"]
    assert read["id"] == f"monitoring/{READER_TOKEN}"


def test_the_metrics_rule_is_the_charts_own_metrics_reader_rule():
    path = requires_upstream("charts-src", "kueue", "0.19.2", "templates", "rbac", "metrics_reader_role.yaml")
    rendered = re.sub(r"\{\{.*?\}\}", "", path.read_text(), flags=re.S)  # the template tags
    chart_role = yaml.safe_load(rendered)
    assert chart_role["rules"] == [READER_RULES[0]]


def test_the_metrics_url_is_the_charts_service():
    service = requires_upstream("charts-src", "kueue", "0.19.2", "templates", "manager", "auth_proxy_service.yaml")
    assert '{{ include "kueue.fullname" . }}-controller-manager-metrics-service' in service.read_text()
    assert METRICS_SERVICE == "kueue-controller-manager-metrics-service"  # release "kueue": fullname "kueue"
    values = yaml.safe_load(requires_upstream("charts-src", "kueue", "0.19.2", "values.yaml").read_text())
    assert {"name": "https", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT} in values[
        "metricsService"
    ]["ports"]


def test_kueue_reports_the_per_clusterqueue_quota_metrics(prod_plan):
    values = prod_plan.named("scheduling-kueue")["inputs"]["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["metrics"] == {"bindAddress": ":8443", "enableClusterQueueResources": True}


def test_queue_and_idle_gpu_thresholds_are_global_macros_with_time_suffixes(prod_plan):
    macros = {
        r["inputs"]["spec"]["macro"]: r["inputs"]["spec"]["value"] for r in prod_plan.by_type(f"{PREFIX}GlobalMacro")
    }
    assert {k: v for k, v in macros.items() if k.startswith(("{$KUEUE.", "{$GPU.IDLE"))} == {
        "{$KUEUE.PENDING.MAX}": "60m",
        "{$KUEUE.QUOTA.IDLE.PCT}": "50",
        "{$KUEUE.EVICTIONS.MAX}": "5",
        "{$KUEUE.BORROWED.GPUS.MAX}": "8",
        "{$KUEUE.BORROWING.PERIOD}": "240m",
        "{$GPU.IDLE.UTIL.MAX}": "5",
        "{$GPU.IDLE.PERIOD}": "60m",
    }
    assert macros["{$KUBE.NODE.CORDONED.MAX}"] == "120m"  # unchanged by the generic minutes suffix


def test_a_team_channel_matches_the_teams_queue_and_namespaces():
    settings = load(stack_doc("prod"))
    channel = settings.monitoring.alerting.channels[0].model_copy(update={"teams": ["llm"]})
    _, _, action = channel_specs(channel, settings.scheduling.teams)
    assert action["event_tags"] == [
        {"tag": "cluster_queue", "value": "llm"},
        {"tag": "namespace", "value": "llm-train"},
        {"tag": "namespace", "value": "llm-eval"},
    ]
    _, _, plain = channel_specs(settings.monitoring.alerting.channels[0], settings.scheduling.teams)
    assert "event_tags" not in plain


def test_a_channel_naming_an_unknown_team_is_refused():
    found = problems("prod", lambda raw: raw["monitoring"]["alerting"]["channels"][0].update({"teams": ["nlp"]}))
    assert found == [
        "monitoring.alerting.channels[0].teams[0]: 'nlp' is not in scheduling.teams (llm, vision, research)"
    ]


def test_bad_queue_thresholds_name_the_field():
    found = problems("prod", lambda raw: raw["monitoring"]["thresholds"].update({"gpuIdlePercent": 0}))
    assert len(found) == 1 and found[0].startswith("monitoring.thresholds.gpuIdlePercent:"), found
    found = problems("prod", lambda raw: raw["monitoring"]["thresholds"].update({"queuePendingMaxMinutes": "soon"}))
    assert len(found) == 1 and found[0].startswith("monitoring.thresholds.queuePendingMaxMinutes:"), found


def test_every_team_namespace_names_its_team_and_the_templates_name_its_queue():
    """The idle-GPU and waiting-list problems name the team through {$TEAM:"<namespace>"} (global macros from
    scheduling.teams) and the queue through {$LOCALQUEUE}, the LocalQueue the platform creates in each."""
    from components.monitoring.config import global_macros, template_sources
    from components.scheduling.config import LOCAL_QUEUE

    settings = load(stack_doc("prod"))
    teams = settings.scheduling.teams
    macros = global_macros(settings.monitoring, "https://zabbix.example", teams)
    expected = {f'{{$TEAM:"{ns}"}}': t.name for t in teams for ns in t.namespace_names}
    assert {k: v for k, (v, _) in macros.items() if k.startswith("{$TEAM:")} == expected
    assert len(expected) >= 4  # llm-train, llm-eval, research, vision
    gpu = yaml.safe_load(template_sources()["gpu-dcgm"][1])["zabbix_export"]["templates"][0]
    defaults = {m["macro"]: m["value"] for m in gpu["macros"]}
    assert defaults["{$LOCALQUEUE}"] == LOCAL_QUEUE
    assert "{$TEAM:" not in "".join(global_macros(settings.monitoring, "https://zabbix.example"))  # no teams, none
