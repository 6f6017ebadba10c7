"""GPUs only through the device plugin: the container toolkit as the rendered GPU Operator values configure it.

The toolkit cannot run here, so its device selection is modelled from its source at the chart's pin (toolkit
v1.20.0, `internal/config/image/cuda_image.go` `VisibleDevices`; the installer flag
`accept-nvidia-visible-devices-envvar-when-unprivileged`, default true, from the variable
ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED, `cmd/nvidia-ctk-installer/toolkit/toolkit.go`), and the model
is run on the configuration the plan renders and on the chart's defaults. docs/limitations.md says what only a GPU
node can confirm.
"""

from __future__ import annotations

from typing import Any

from tests.upstream import upstream_values

CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"  # GPU Operator v26.7.0 sets it on the device plugin and the toolkit


def _flag(env: list[dict[str, str]], name: str, default: bool) -> bool:
    """urfave/cli's reading of a bool flag's variable: absent gives the default."""
    value = next((e["value"] for e in env if e["name"] == name), None)
    return default if value is None else value.strip().lower() in ("1", "t", "true")


def visible_devices(toolkit_env: list[dict[str, str]], container: dict[str, Any]) -> list[str]:
    """The devices the toolkit's runtime gives a container (toolkit v1.20.0 `CUDA.VisibleDevices`): CDI device
    annotations first; then volume mounts, if accepted; then NVIDIA_VISIBLE_DEVICES, only for a privileged container
    or when the unprivileged option is on."""
    annotations = [v for k, v in container.get("annotations", {}).items() if k.startswith(CDI_ANNOTATION_PREFIX)]
    if annotations:
        return annotations
    if _flag(toolkit_env, "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", False) and container.get("mounts"):
        return list(container["mounts"])
    env = [
        e for e in container.get("env", []) if e["name"] == "NVIDIA_VISIBLE_DEVICES" and e["value"] not in ("", "void")
    ]
    if not env:
        return []
    if container.get("privileged") or _flag(
        toolkit_env, "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", True
    ):
        return [env[0]["value"]]
    return []


CUDA_IMAGE_ENV = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]  # what CUDA base images set


def _toolkit_env(plan) -> list[dict[str, str]]:
    return plan.named("gpu-operator")["inputs"]["values"]["toolkit"]["env"]


def test_the_toolkit_ignores_the_variable_in_unprivileged_containers(prod_plan):
    env = _toolkit_env(prod_plan)
    assert visible_devices(env, {"env": CUDA_IMAGE_ENV}) == []
    # The chart's defaults would hand every GPU of the node to the same container: the model can fail.
    assert upstream_values("gpu-operator", "v26.7.0")["toolkit"]["env"] == []
    assert visible_devices([], {"env": CUDA_IMAGE_ENV}) == ["all"]
    # What the device plugin allocated (CDI annotations) still reaches the container; the operator's own
    # privileged operands keep the variable.
    allocated = {"env": CUDA_IMAGE_ENV, "annotations": {"cdi.k8s.io/nvidia-device-plugin_uuid": "nvidia.com/gpu=GPU-1"}}
    assert visible_devices(env, allocated) == ["nvidia.com/gpu=GPU-1"]
    assert visible_devices(env, {"env": CUDA_IMAGE_ENV, "privileged": True}) == ["all"]


def test_the_device_plugin_strategy_does_not_read_the_variable(prod_plan):
    """With `cdi.enabled`, GPU Operator v26.7.0 sets the plugin's DEVICE_LIST_STRATEGY to `cdi-annotations,cdi-cri`
    over any value given (controllers/object_controls.go `transformDevicePluginCtrForCDI` / `setContainerEnv`):
    CDI devices through the CRI, no variable. The values keep CDI on and set no strategy of their own."""
    values = prod_plan.named("gpu-operator")["inputs"]["values"]
    assert values["cdi"]["enabled"] is True
    plugin_env = values.get("devicePlugin", {}).get("env", [])
    assert all(e["name"] != "DEVICE_LIST_STRATEGY" for e in plugin_env)
    assert _flag(_toolkit_env(prod_plan), "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", True) is False


def test_a_privileged_team_pod_is_refused_by_pod_security(prod_plan):
    """The variable still works in a privileged container; no team namespace allows one (baseline or restricted)."""
    for ns in prod_plan.by_type("kubernetes:core/v1:Namespace"):
        labels = ns["inputs"]["metadata"].get("labels", {})
        if "ml-platform.io/team" in labels:
            assert labels["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")
