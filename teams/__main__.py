"""ml-platform-teams: each team's view of the platform, in a stack of its own.

A team never reads the platform stack: that stack holds the platform's secrets (its config, state and
secret outputs), and a StackReference copies every output of the stack it reads, secrets included,
into the referencing stack. This program reads only the public contract the platform writes to the
cluster (`kube-public/ml-platform-contract`, non-secret by construction) and, for a team stack, makes
that team's own credential:

- `credential: token` (sites without OIDC): a token Secret for the team's CI ServiceAccount (the
  platform creates the account and binds it in the team's namespaces only). The token lives in this
  stack alone; a team granted read access to its own stack cannot read another team's.
- `credential: oidc`: a kubeconfig that logs in through the site's identity provider
  (`kubectl oidc-login`); nothing secret exists.

It runs with the operator's cluster-admin credential from KUBECONFIG, which is not an input of any
resource here and so never enters this stack's state. Stack outputs: the platform's public contract
(the same names as the platform's non-secret outputs), and for a team `team`, `namespaces`,
`localQueue` and `kubeconfig`.

    KUBECONFIG=~/.kube/ml-prod pulumi up -s prod-vision
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the platform's own contract definitions

from components.public_contract import CONTRACT_CONFIGMAP, CONTRACT_NAMESPACE  # noqa: E402
from components.scheduling.config import LOCAL_QUEUE, ci_account  # noqa: E402
from stacks.outputs import PUBLIC  # noqa: E402


def program() -> dict[str, Any]:
    config = pulumi.Config()
    team = config.get("team") or ""
    credential = config.get("credential") or "token"
    if credential not in ("token", "oidc"):
        raise ValueError(f"ml-platform-teams:credential: {credential!r}; set `token` or `oidc`")
    # No kubeconfig input: the provider plugin loads KUBECONFIG of whoever runs `pulumi up` itself. Left unset,
    # the SDK would copy that local path into the provider's inputs, so into this stack's state
    # (pulumi_kubernetes/provider.py: `if kubeconfig is None: kubeconfig = get_env('KUBECONFIG')`); an input that
    # resolves to nothing keeps it out.
    provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.from_input(None))
    on_cluster = pulumi.ResourceOptions(provider=provider)
    published = k8s.core.v1.ConfigMap.get("contract", f"{CONTRACT_NAMESPACE}/{CONTRACT_CONFIGMAP}", opts=on_cluster)
    contract = published.data.apply(parse_contract)
    outputs: dict[str, Any] = {name: contract.apply(lambda c, n=name: c[n]) for name in PUBLIC}
    if not team:
        return outputs

    namespaces = contract.apply(lambda c: team_namespaces(c, team, credential))
    namespace = namespaces.apply(lambda names: names[0])
    server = contract.apply(lambda c: c["apiEndpoint"])
    if credential == "oidc":
        cluster_ca = k8s.core.v1.ConfigMap.get("cluster-ca", f"{CONTRACT_NAMESPACE}/kube-root-ca.crt", opts=on_cluster)
        kubeconfig: pulumi.Output[str] = pulumi.Output.all(
            server, cluster_ca.data, contract.apply(lambda c: c["oidcLogin"]), namespace
        ).apply(lambda a: oidc_kubeconfig(team, a[0], a[1]["ca.crt"], a[2], a[3]))
    else:
        account = ci_account(team)
        # The token controller fills `token` and `ca.crt`; the provider waits for them
        # (pulumi-kubernetes#2048). Deleting this stack's Secret revokes the token.
        token = k8s.core.v1.Secret(
            "ci-token",
            metadata={
                "name": f"{account}-token",
                "namespace": namespace,
                "annotations": {"kubernetes.io/service-account.name": account},
            },
            type="kubernetes.io/service-account-token",
            opts=pulumi.ResourceOptions(provider=provider, additional_secret_outputs=["data"]),
        )
        kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(server, namespace, token.data).apply(lambda a: token_kubeconfig(team, a[0], a[1], a[2]))
        )
    return {**outputs, "team": team, "namespaces": namespaces, "localQueue": LOCAL_QUEUE, "kubeconfig": kubeconfig}


def parse_contract(data: dict[str, str]) -> dict[str, Any]:
    missing = sorted(set(PUBLIC) - set(data))
    if missing:
        raise ValueError(
            f"{CONTRACT_NAMESPACE}/{CONTRACT_CONFIGMAP} lacks {missing}: run `pulumi up` of the platform first"
        )
    return {name: json.loads(data[name]) for name in PUBLIC}


def team_namespaces(contract: dict[str, Any], team: str, credential: str) -> list[str]:
    teams = contract["teamNamespaces"]
    if team not in teams:
        raise ValueError(
            f"ml-platform-teams:team: {team!r} is not a team of this platform ({', '.join(sorted(teams))}); "
            "add it to the platform's scheduling.teams first"
        )
    if bool(contract["oidcLogin"]) != (credential == "oidc"):
        want = "oidc" if contract["oidcLogin"] else "token"
        raise ValueError(f"ml-platform-teams:credential: {credential!r}, but the platform expects {want!r}")
    return teams[team]


def token_kubeconfig(team: str, server: str, namespace: str, data: dict[str, str] | None) -> str:
    """The CI ServiceAccount's kubeconfig: API endpoint, cluster CA and token (the Secret's base64 data)."""
    data = data or {}
    token = base64.b64decode(data.get("token", "")).decode()
    return _kubeconfig(team, server, data.get("ca.crt", ""), namespace, {"token": token})


def oidc_kubeconfig(team: str, server: str, ca_pem: str, login: dict[str, str], namespace: str) -> str:
    """A kubeconfig that asks the site's identity provider for a token (int128/kubelogin, `kubectl
    oidc-login`): the person logs in as themselves; the file holds no secret."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "kubectl",
            "args": [
                "oidc-login",
                "get-token",
                f"--oidc-issuer-url={login['issuerUrl']}",
                f"--oidc-client-id={login['clientId']}",
            ],
            "interactiveMode": "IfAvailable",
        }
    }
    return _kubeconfig(team, server, base64.b64encode(ca_pem.encode()).decode(), namespace, user)


def _kubeconfig(team: str, server: str, ca_data: str, namespace: str, user: dict[str, Any]) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ml-platform", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": team, "user": user}],
        "contexts": [{"name": team, "context": {"cluster": "ml-platform", "user": team, "namespace": namespace}}],
        "current-context": team,
    }
    return yaml.safe_dump(config, sort_keys=False)


if __name__ == "__main__":
    for name, value in program().items():
        pulumi.export(name, value)
