"""The harness's stack: a small inventory shaped like prod, written as a stack file exactly as an operator
writes one (addresses, `ssh.user`, the bastion, every host key pinned as `ssh-keyscan -t ed25519`
prints it), and its plan from `python -m stacks.plan`.

Shaped like prod: three control-plane servers (the init server, then two that join one at a time, as
prod's do), two CPU agents, a storage host whose OSD disks are loop devices, a GPU node with a tier-1
NVMe (a loop device) and InfiniBand settings, a NAS host with four MinIO drives (loop devices) that runs
both NAS steps: MinIO (its drives formatted XFS, mounted, the env file, TLS, the unit; the server binary is
a stand-in) and the Zabbix agent 2 (Debian's own package, from a signed apt repository of the artifact
server). The stack's air-gap settings point at the artifact server: cluster.install, storage.minio.artifact
and monitoring.nasAgent, as a site points them at its mirrors. Prod has more of the last four (32 agents,
15 GPU nodes, 4 NAS hosts): their steps are the same on every machine of a role, and a 2-core test machine
boots and apt-installs these within the time budget. Twins (`TWINS`) are further machines that receive
another node's steps unchanged: the interruption cases run there, and their fingerprint must equal the
original's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.hosts import nas
from tests.hosts.machines import BASTION_ADDRESS, USER, Lab

ROOT = Path(__file__).resolve().parents[2]
STACK = "hosts"
# node name -> role settings (as in Pulumi.prod.yaml)
NODES = {
    # Replicated Ceph pools need three storage hosts: the server and the agent carry one OSD disk each.
    "server-1": {
        "role": "cpu",
        "controlPlane": True,
        "osdDevices": [{"device": "/dev/disk/by-id/wwn-0x5000c500a1b2c311", "wipe": False}],
    },
    "server-2": {"role": "cpu", "controlPlane": True},
    "server-3": {"role": "cpu", "controlPlane": True},
    "agent-1": {"role": "cpu", "osdDevices": [{"device": "/dev/disk/by-id/wwn-0x5000c500a1b2c321", "wipe": True}]},
    "agent-2": {"role": "cpu"},
    "storage-1": {
        "role": "cpu",
        "osdDevices": [
            {"device": "/dev/disk/by-id/wwn-0x5000c500a1b2c301", "wipe": True},
            {"device": "/dev/disk/by-id/wwn-0x5000c500a1b2c302", "wipe": False},
        ],
    },
    "gpu-1": {
        "role": "gpu",
        "gpu": {"model": "NVIDIA H100 80GB HBM3", "count": 8},
        "infiniband": {"interface": "ib0", "address": "192.168.60.21"},
        "nvme": [{"device": "/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0T500121", "format": True}],
    },
}
NAS = {
    "nas-1": {"drives": [{"device": f"/dev/disk/by-id/wwn-0x5000c500e0a00{i}00", "format": True} for i in range(1, 5)]}
}
# twin machine -> the node whose steps it receives (the interruption cases)
TWINS = {"gpu-1-twin": "gpu-1", "storage-1-twin": "storage-1"}


def disks() -> dict[str, list[str]]:
    """Loop devices per machine, by their /dev/disk/by-id name."""
    by_node = {
        name: [d["device"] for d in spec.get("osdDevices", []) + spec.get("nvme", [])] for name, spec in NODES.items()
    }
    by_node.update({name: [d["device"] for d in spec["drives"]] for name, spec in NAS.items()})
    by_node.update({twin: by_node[node] for twin, node in TWINS.items()})
    return {name: [Path(d).name for d in devices] for name, devices in by_node.items() if devices}


def rke2_version() -> str:
    return yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())["config"]["ml-platform:cluster"]["rke2Version"]


def machine_names() -> list[str]:
    return [*NODES, *NAS, *TWINS]


def stack_doc(lab: Lab) -> dict:
    base = yaml.safe_load((ROOT / "Pulumi.lab.yaml").read_text())["config"]
    m = lab.machines
    config = dict(base)
    config["ml-platform:cluster"] = {
        **base["ml-platform:cluster"],
        "name": "ml-hosts",
        "apiEndpoint": m["server-1"].address,
        "initServer": "server-1",
        "timeServers": [f"ntp.{STACK}.example.internal"],
        # The stack's own air-gap settings, pointed at the harness's artifact server (the RKE2 stand-in).
        "install": {
            "installerUrl": lab.artifacts.installer_url,
            "artifactUrl": lab.artifacts.artifact_url,
            "method": "tar",
        },
        "joinTimeoutSeconds": 180,
    }
    config["ml-platform:ssh"] = {
        "user": USER,
        "port": 22,
        "bastion": {"host": BASTION_ADDRESS, "port": 22, "user": USER, "hostKey": lab.bastion.host_key},
        "allowUnpinnedHostKeys": False,
        "dialErrorLimit": 10,
        "perDialTimeoutSeconds": 15,
    }
    config["ml-platform:nodes"] = [
        {"name": name, "address": m[name].address, "hostKey": m[name].host_key, **spec} for name, spec in NODES.items()
    ]
    config["ml-platform:nas"] = {
        "hosts": [
            {"name": name, "address": m[name].address, "hostKey": m[name].host_key, **spec}
            for name, spec in NAS.items()
        ]
    }
    config["ml-platform:storage"] = {
        "ceph": {"monCount": 3},
        # The stack's own air-gap setting, pointed at the artifact server (the MinIO stand-in).
        "minio": {
            **base["ml-platform:storage"]["minio"],
            "artifact": {"url": lab.artifacts.minio_url, "sha256": lab.artifacts.minio_sha256},
        },
    }
    # The NAS agent's apt repository, pointed at the artifact server's (Debian's own zabbix-agent2).
    monitoring = base.get("ml-platform:monitoring", {})
    config["ml-platform:monitoring"] = {
        **monitoring,
        "nasAgent": {
            **monitoring.get("nasAgent", {}),
            "aptRepository": lab.artifacts.zabbix_repository,
            "aptSuite": nas.SUITE,
            "aptKeyUrl": lab.artifacts.zabbix_key_url,
            "version": lab.artifacts.zabbix_version,
        },
    }
    config["ml-platform:scheduling"] = {
        **base["ml-platform:scheduling"],
        "teams": [
            {
                "name": "lab",
                "groups": ["lab-users"],
                "quotas": {
                    "cpu": {"cpu": 16, "memory": "64Gi"},
                    "nvidia-h100-80gb-hbm3": {"gpus": 8, "cpu": 32, "memory": "192Gi"},
                },
            }
        ],
    }
    return {"config": config}


@dataclass
class StackPlan:
    config_file: Path
    plan_file: Path
    plan: dict


def write_plan(lab: Lab, directory: Path) -> StackPlan:
    """Write Pulumi.hosts.yaml and its plan JSON with `python -m stacks.plan` (what `make plan` runs)."""
    config_file = directory / f"Pulumi.{STACK}.yaml"
    config_file.write_text(
        "# Generated by the host harness (tests/hosts/inventory.py); host keys pinned as ssh-keyscan prints them.\n"
        + yaml.safe_dump(stack_doc(lab), sort_keys=False)
    )
    plan_file = directory / "plan.json"
    proc = subprocess.run(
        [sys.executable, "-m", "stacks.plan", STACK, "--config", str(config_file), "--out", str(plan_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"stacks.plan failed for the harness's stack:\n{proc.stderr[-3000:]}")
    return StackPlan(config_file, plan_file, json.loads(plan_file.read_text()))


def load_settings(config_file: Path):
    """The validated settings of the harness's stack file (as `python -m stacks.drift` loads them)."""
    from settings import SECRET_KEYS, load

    doc = yaml.safe_load(config_file.read_text())["config"]
    raw = {k.split(":", 1)[1]: v for k, v in doc.items() if k.startswith("ml-platform:")}
    return load({k: v for k, v in raw.items() if k not in SECRET_KEYS})


def stack_doc_of(config_file: Path) -> dict:
    return yaml.safe_load(config_file.read_text())["config"]


# Secrets a real `up` generates (RandomPassword, RandomBytes results), and outputs of earlier steps, by
# resource name; the MinIO tier's TLS material is made per stack file (nas.tls_outputs).
TOKENS = {
    "rke2-token": {"result": "harness-server-token-0123456789abcdef"},
    "rke2-agent-token": {"result": "harness-agent-token-fedcba9876543210"},
    **nas.TOKENS,
}


def revealed(config_file: Path, computed: dict) -> dict[str, dict]:
    """The inputs of every resource with secrets revealed, by name: the same program evaluated as for the
    plan JSON, with what a deployment knows by then (`computed`: the tokens, a step's stdout)."""
    import os

    from settings import config_file as stack_file
    from stacks import engine

    config, secret_keys = engine.load_stack_config(STACK, config_file)
    previous = os.environ.get(stack_file.STACK_FILE_ENV)
    os.environ[stack_file.STACK_FILE_ENV] = str(config_file)
    try:
        generated = {**TOKENS, **nas.tls_outputs(config_file)}
        plan = engine.run(STACK, config, secret_keys, computed={**generated, **computed})
    finally:
        if previous is None:
            os.environ.pop(stack_file.STACK_FILE_ENV, None)
        else:
            os.environ[stack_file.STACK_FILE_ENV] = previous
    return {r["name"]: plan.revealed[r["urn"]] for r in plan.resources}
