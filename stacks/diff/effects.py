"""Danger derived from the plan itself: what an update, a replacement and a delete of each resource kind do, declared
once per kind (`KINDS`), counted over the diff. A new kind in a plan without a declaration fails the suite
(tests/test_danger_effects.py walks prod, lab and the benchmark inventories), so nothing the plan can hold goes
unnamed because nobody listed it.

An effect is Danger or not (`quiet`); an update's effect may hold only when its change goes a certain way
(`lowered`: a quantity or count at the named paths goes down, compared by value; `narrowed`: a list there loses an
entry; `touched`: anything there changes). Where another Danger class words the same step in detail (the host steps'
deletes, stateful releases), the effect names it (`by`) and is left out when that class spoke.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from settings.quantities import parse_quantity
from stacks.diff.core import ABSENT, SECRET, Change, DangerClass, Entry, Sides, command_env

When = Callable[[list[Change]], bool]


def _always(_: list[Change]) -> bool:
    return True


def _under(change: Change, prefixes: tuple[str, ...]) -> bool:
    bare = change.path.removeprefix("inputs.")
    return any(bare == p or bare.startswith((f"{p}.", f"{p}[")) for p in prefixes)


def _amount(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(parse_quantity(value))
    except (ValueError, TypeError, AttributeError):
        return None


def went_down(change: Change) -> bool:
    """A value lowered (quantities by value: `100Ti` -> `20Ti`), removed, or a list that lost an entry."""
    old, new = change.old, change.new
    if new is ABSENT or new is None:
        return old is not ABSENT and old is not None
    if isinstance(old, list) and isinstance(new, list):
        return any(item not in new for item in old)
    before, after = _amount(old), _amount(new)
    return before is not None and after is not None and after < before


def lowered(*prefixes: str) -> When:
    """The update lowers an amount (or removes an entry) under one of `prefixes`."""
    return lambda changes: any(_under(c, prefixes) and went_down(c) for c in changes)


def narrowed(*prefixes: str) -> When:
    """An entry is taken off a list under one of `prefixes` (a subject, a rule, a range)."""

    def check(changes: list[Change]) -> bool:
        return any(
            _under(c, prefixes)
            and (
                (c.new is ABSENT and c.old is not ABSENT)
                or (isinstance(c.old, list) and isinstance(c.new, list) and any(i not in c.new for i in c.old))
            )
            for c in changes
        )

    return check


def touched(*prefixes: str) -> When:
    return lambda changes: any(_under(c, prefixes) for c in changes)


@dataclass(frozen=True)
class Effect:
    """What one action does to a resource of a kind, in plain words. `danger`: named under Danger; `when`: for an
    update, which changes have this effect (others are quiet updates); `by`: the Danger classes (modules of
    `stacks.diff`, space-separated) that word it in more detail."""

    what: str
    danger: bool = True
    when: When = field(default=_always, compare=False)
    by: str = ""


def quiet(what: str) -> Effect:
    return Effect(what, danger=False)


@dataclass(frozen=True)
class KindEffects:
    update: Effect
    replace: Effect
    delete: Effect

    def of(self, action: str) -> Effect:
        return self.update if action == "update" else self.delete if action == "delete" else self.replace


K8S = "kubernetes:"
RECREATED = quiet("deleted and created again with the same content")


def _k8s(update: Effect, delete: Effect, replace: Optional[Effect] = None) -> KindEffects:
    """A Kubernetes object: replacing it deletes it first (the same name) unless said otherwise."""
    return KindEffects(
        update, replace or Effect(f"deleted and created again: meanwhile, {delete.what}", delete.danger), delete
    )


def _access(what: str) -> KindEffects:
    return _k8s(
        Effect(f"subjects or rules taken off lose {what}", when=narrowed("subjects", "rules")),
        Effect(f"removes access: its subjects lose {what}"),
    )


def _policy(what: str) -> KindEffects:
    return _k8s(quiet(f"{what}: judged by the new expression from now on"), Effect(f"stops enforcing {what}"))


def _zabbix(delete: str, update: str = "updated through the Zabbix API") -> KindEffects:
    return KindEffects(quiet(update), Effect(f"deleted and created again in Zabbix: {delete}"), Effect(delete))


_QUEUE = "admitted workloads above the lowered quota may be preempted; new ones wait"
KINDS: dict[str, KindEffects] = {
    # host steps: what a delete does depends on its delete script (drain, uninstall, wipe, or nothing without one),
    # so `stacks.diff.hosts` words each one from its script; a step without a delete script leaves the host as is
    "command:remote:Command": KindEffects(
        quiet("runs its script on the host again (idempotent)"),
        quiet("runs its delete script (named per script by the host-step class), then its create"),
        quiet("runs its delete script (named per script by the host-step class)"),
    ),
    "command:remote:CopyToRemote": KindEffects(
        quiet("copies the file to the host again"), quiet("copies the file again"), quiet("the file stays on the host")
    ),
    f"{K8S}admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy": _policy("an admission policy"),
    f"{K8S}admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding": _policy("an admission policy's binding"),
    f"{K8S}apiextensions.k8s.io/v1:CustomResourceDefinition": _k8s(
        quiet("the CRD's schema changes"), Effect("deletes the kind and every object of it, cluster-wide")
    ),
    f"{K8S}apps/v1:DaemonSet": _k8s(
        Effect("its pods roll on every node it selects", when=touched("spec.template")),
        Effect("its pods stop on every node it ran on"),
    ),
    f"{K8S}apps/v1:Deployment": _k8s(quiet("its pods roll"), Effect("its pods stop")),
    f"{K8S}batch/v1:CronJob": _k8s(quiet("later runs use the new spec"), Effect("its scheduled runs stop")),
    f"{K8S}batch/v1:Job": KindEffects(quiet("updated"), quiet("runs again"), quiet("its pods are deleted")),
    f"{K8S}cilium.io/v2:CiliumNetworkPolicy": _k8s(
        Effect("connections it no longer allows are cut", when=narrowed("spec")),
        Effect("the traffic it allowed is denied, or what it isolated is open (whichever it did)"),
    ),
    f"{K8S}networking.k8s.io/v1:NetworkPolicy": _k8s(
        Effect("connections it no longer allows are cut", when=narrowed("spec")),
        Effect("the traffic it allowed is denied, or what it isolated is open (whichever it did)"),
    ),
    f"{K8S}core/v1:ConfigMap": KindEffects(
        quiet("readers see the new data"), quiet("created again with the new data"), quiet("its readers lose it")
    ),
    f"{K8S}core/v1:LimitRange": _k8s(
        quiet("new pods get the new defaults and bounds"), Effect("new pods get no defaults or bounds in its namespace")
    ),
    f"{K8S}core/v1:Namespace": _k8s(
        quiet("its labels (Pod Security, team) change"),
        Effect("Kubernetes deletes every object in it", by="releases"),
    ),
    f"{K8S}core/v1:NodePatch": _k8s(
        Effect("a label or taint taken off a node (placement, isolation)", when=narrowed("metadata.labels", "spec")),
        Effect("the labels and taints it set leave the node (placement, isolation)"),
    ),
    f"{K8S}core/v1:ResourceQuota": _k8s(
        Effect("refuses new work above the lowered quota (running pods stay)", when=lowered("spec.hard")),
        Effect("the namespace loses its quota backstop"),
    ),
    f"{K8S}core/v1:Secret": _k8s(
        Effect("a credential rotated: readers must pick up the new value", when=touched("data", "stringData")),
        Effect("a credential removed: pods and agents reading it fail"),
    ),
    f"{K8S}core/v1:Service": _k8s(
        quiet("ports or selector change"), Effect("its name and address go away: clients lose it")
    ),
    f"{K8S}core/v1:ServiceAccount": _k8s(quiet("updated"), Effect("its tokens stop working (CI, controllers)")),
    f"{K8S}helm.sh/v3:Release": KindEffects(
        quiet("upgraded in place (the rollouts section says what restarts)"),
        Effect("uninstalled and installed again", by="releases"),
        Effect("uninstalled with what it runs", by="releases"),
    ),
    f"{K8S}kueue.x-k8s.io/v1beta2:ClusterQueue": _k8s(
        Effect(_QUEUE, when=lowered("spec.resourceGroups", "spec.fairSharing")),
        Effect("the queue and its quota go: workloads admitted through it are evicted", by="releases"),
    ),
    f"{K8S}kueue.x-k8s.io/v1beta2:LocalQueue": _k8s(
        quiet("updated"), Effect("jobs submitted to it are no longer admitted")
    ),
    f"{K8S}kueue.x-k8s.io/v1beta2:ResourceFlavor": _k8s(
        quiet("its node labels change"), Effect("quotas on the flavor admit nothing")
    ),
    f"{K8S}kueue.x-k8s.io/v1beta2:WorkloadPriorityClass": _k8s(
        Effect("the preemption order changes", when=touched("value")), Effect("jobs naming it are refused")
    ),
    f"{K8S}mellanox.com/v1alpha1:IPoIBNetwork": _k8s(
        quiet("new pods get the new network"), Effect("pods asking for the IPoIB network cannot start")
    ),
    f"{K8S}mellanox.com/v1alpha1:NicClusterPolicy": _k8s(
        Effect("the network operator rolls its driver pods on every GPU node (RDMA traffic stops meanwhile)"),
        Effect("the InfiniBand driver and device plugins leave every GPU node"),
    ),
    f"{K8S}nv-ipam.nvidia.com/v1alpha1:IPPool": _k8s(
        quiet("new addresses come from the new pool"), Effect("IPoIB pods get no address")
    ),
    f"{K8S}rbac.authorization.k8s.io/v1:ClusterRole": _access("the cluster role's permissions"),
    f"{K8S}rbac.authorization.k8s.io/v1:ClusterRoleBinding": _access("the cluster role it binds"),
    f"{K8S}rbac.authorization.k8s.io/v1:Role": _access("the role's permissions"),
    f"{K8S}rbac.authorization.k8s.io/v1:RoleBinding": _access("the role it binds in its namespace"),
    f"{K8S}scheduling.volcano.sh/v1beta1:PodGroup": _k8s(quiet("updated"), quiet("its gang is dissolved")),
    f"{K8S}storage.k8s.io/v1:StorageClass": KindEffects(
        quiet("updated"),
        Effect("replaced: claims naming it cannot provision meanwhile", by="releases"),
        Effect("claims naming it can no longer provision", by="releases"),
    ),
    f"{K8S}trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime": _k8s(
        quiet("new TrainJobs use the new runtime"), Effect("TrainJobs naming it are refused")
    ),
    "pulumi:providers:kubernetes": KindEffects(
        quiet("how the program reaches the cluster"),
        Effect("every object bound to it is replaced", by="membership"),
        Effect("the objects bound to it are orphaned"),
    ),
    "pulumi-python:dynamic/zabbix:Action": _zabbix("its alerts stop being sent"),
    "pulumi-python:dynamic/zabbix:ApiToken": KindEffects(
        quiet("updated"),
        Effect("a new token: readers holding the old one are refused until they read the new one"),
        Effect("readers of the Zabbix API using it are refused"),
    ),
    "pulumi-python:dynamic/zabbix:Bootstrap": _zabbix("the program loses its Zabbix API login"),
    "pulumi-python:dynamic/zabbix:Dashboard": KindEffects(
        quiet("updated"), quiet("created again"), quiet("the dashboard goes")
    ),
    "pulumi-python:dynamic/zabbix:GlobalMacro": _zabbix("triggers reading it fall back to their defaults"),
    # a host leaves monitoring with its node or NAS host, whose removal those classes name
    "pulumi-python:dynamic/zabbix:Host": KindEffects(
        quiet("updated through the Zabbix API"),
        Effect("the host is deleted and created again in Zabbix: its history is lost"),
        Effect("the host's monitoring and its history are deleted", by="hosts minio"),
    ),
    # one per node group and one for the NAS: an update creates, updates and deletes the hosts that changed
    "pulumi-python:dynamic/zabbix:HostSet": KindEffects(
        quiet("its hosts created, updated or deleted through the Zabbix API (a host that left is deleted)"),
        quiet("never replaced"),
        Effect("its hosts' monitoring and their history are deleted", by="hosts minio"),
    ),
    "pulumi-python:dynamic/zabbix:HostClaim": KindEffects(
        quiet("hosts entering its set are marked as its own"), quiet("never replaced"), quiet("nothing in Zabbix")
    ),
    "pulumi-python:dynamic/zabbix:HostGroup": _zabbix("permissions and actions keyed to the group lose it"),
    "pulumi-python:dynamic/zabbix:MediaType": _zabbix("alerts stop reaching its channel (Slack, Mattermost)"),
    "pulumi-python:dynamic/zabbix:TemplateImport": _zabbix("items and triggers of the template leave its hosts"),
    "pulumi-python:dynamic/zabbix:User": _zabbix("the user's access to Zabbix"),
    "pulumi-python:dynamic/zabbix:UserGroup": _zabbix("its members' permissions"),
    "pulumi-python:dynamic/zabbix:UserRole": _zabbix("its users' permissions"),
    "pulumi-python:dynamic:Resource": KindEffects(
        quiet("updated on MinIO"),
        Effect("a MinIO bucket or user deleted and created again", by="minio"),
        Effect("a MinIO bucket or user deleted (a user's access; a bucket only when empty)", by="minio"),
    ),
    "random:index/randomPassword:RandomPassword": KindEffects(
        quiet("updated"),
        Effect("a new password: everything that uses it rotates"),
        Effect("the password leaves the state"),
    ),
    "random:index/randomBytes:RandomBytes": KindEffects(
        quiet("updated"), Effect("new key material: what it encrypts or signs rotates"), quiet("leaves the state")
    ),
    "random:index/randomId:RandomId": KindEffects(
        quiet("updated"), Effect("a new id: names derived from it change"), quiet("leaves the state")
    ),
    "tls:index/privateKey:PrivateKey": KindEffects(
        quiet("updated"), Effect("a new key: certificates signed with it are replaced"), quiet("leaves the state")
    ),
    "tls:index/selfSignedCert:SelfSignedCert": KindEffects(
        quiet("updated"), Effect("a new CA: clients trusting the old one refuse the new certificates"), quiet("gone")
    ),
    "tls:index/certRequest:CertRequest": KindEffects(quiet("updated"), quiet("a new request"), quiet("gone")),
    "tls:index/locallySignedCert:LocallySignedCert": KindEffects(
        quiet("updated"), Effect("a new certificate: servers using it restart to load it"), quiet("gone")
    ),
}
# Component resources group their children and do nothing of their own (`mlplatform:<area>:<Component>`).
COMPONENT = KindEffects(quiet("a component"), quiet("a component"), quiet("a component"))


def effects_of(type_: str) -> Optional[KindEffects]:
    if type_.startswith("mlplatform:"):
        return COMPONENT
    return KINDS.get(type_)


def undeclared(types: set[str]) -> list[str]:
    return sorted(t for t in types if effects_of(t) is None)


def plan_effects(sides: Sides) -> dict[tuple[str, str, str, str], list[Entry]]:
    """(type, action, effect, worded by) -> the entries with that Danger effect (retained deletes left out)."""
    found: dict[tuple[str, str, str, str], list[Entry]] = {}
    for entry in sides.entries:
        kind = effects_of(entry.type)
        if kind is None or entry.action == "create":
            continue
        if entry.action == "delete" and entry.options.get("retainOnDelete"):
            continue
        effect = kind.of(entry.action)
        if not effect.danger or (entry.action == "update" and not effect.when(entry.changes)):
            continue
        found.setdefault((entry.type, entry.action, effect.what, effect.by), []).append(entry)
    return found


def _names(entries: list[Entry]) -> str:
    names = sorted({e.host or e.name for e in entries})
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def kind_danger(sides: Sides, worded: frozenset[str] = frozenset()) -> list[str]:
    """One line per kind, action and effect, with the count and the objects."""
    out = []
    for (type_, action, what, by), entries in sorted(plan_effects(sides).items()):
        if by and set(by.split()) & worded:
            continue
        short = type_.rsplit(":", 1)[-1]
        verb = {"update": "updated", "delete": "deleted"}.get(action, "replaced")
        out.append(f"{len(entries)} {short} {verb} ({_names(entries)}): {what}")
    return out


def _hosts_of(sides: Sides, entry: Entry) -> list[str]:
    """The hosts a changed resource configures: a host step's node (or the agent host it installs), the agent hosts
    a Zabbix host set holds (each gets the set's secrets: the agents' PSK)."""
    if entry.type == "command:remote:Command":
        inputs = (sides.after.get(entry.urn) or {}).get("inputs", {})
        host = entry.host or command_env(inputs.get("create")).get("ZBX_HOSTNAME")
        return [host] if host else []
    if entry.type != "pulumi-python:dynamic/zabbix:HostSet":
        return []
    spec = (sides.after.get(entry.urn) or {}).get("inputs", {}).get("spec")
    hosts = spec.get("hosts") if isinstance(spec, dict) else None
    return list(hosts) if isinstance(hosts, dict) else []


def rotation_danger(sides: Sides) -> list[str]:
    """Secret config values that changed (their digests in the plans) and how many resources carry the new value:
    a credential rotated on N hosts."""
    old, new = sides.old.get("secretConfig") or {}, sides.new.get("secretConfig") or {}
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k != "ml-platform:rke2Token")
    if not keys:
        return []
    carrying = [e for e in sides.entries if e.action != "create" and any(SECRET in (c.old, c.new) for c in e.changes)]
    hosts = sorted({h for e in carrying for h in _hosts_of(sides, e)})
    by_type: dict[str, int] = {}
    for entry in carrying:
        short = entry.type.rsplit(":", 1)[-1]
        by_type[short] = by_type.get(short, 0) + 1
    spread = ", ".join(f"{n} {t}" for t, n in sorted(by_type.items())) or "no resource of this plan"
    where = f" on {len(hosts)} host(s)" if hosts else ""
    names = [k.split(":", 1)[-1] for k in keys]
    declared = "; ".join(f"{name}: {_secret_change(name)}" for name in names)
    return [
        f"credential rotated ({', '.join(names)}): {len(carrying)} resource(s) take the new value{where} ({spread}); "
        f"{declared}. Until every one has it, whatever still holds the old value is refused: rotate in one `up` and "
        "watch the monitoring for hosts that fall silent"
    ]


def _secret_change(key: str) -> str:
    """What the secret's own declaration says its change does (settings/secrets.py, `CHANGES`)."""
    from settings import StackSecrets
    from settings.declare import changes_of

    names = {(info.alias or name): name for name, info in StackSecrets.model_fields.items()}
    change = changes_of(StackSecrets).get(names.get(key, ""))
    return change.describe() if change is not None else "not declared"


CLASSES = (
    DangerClass(
        "what the plan does to each resource kind (update, replace, delete: access removed, quota lowered, a "
        "credential rotated, a policy no longer enforced), with counts; every kind a plan can hold declares it",
        kind_danger,
    ),
    DangerClass("a credential rotated: how many resources and hosts take the new value", rotation_danger),
)
