"""Settings: the ground floor of the import graph (components and stacks import it; it imports neither).

One module per area (`cluster`, `nodes`, `network`, `gpu`, `storage`, `scheduling`, `monitoring`,
`charts`), shared field types in `types`, cross-area rules in `rules/` (one module per area), the root model in `root`,
`load()` and its messages in `load`. Import what you need from here.
"""

from settings.charts import Chart, Charts
from settings.cluster import (
    Bastion,
    ClusterSettings,
    ClusterUpgrade,
    EtcdSnapshots,
    Rke2Install,
    SshSettings,
    VirtualIp,
)
from settings.gpu import GpuDriver, GpuSettings, Tier1Settings, TimeSlicing
from settings.load import load
from settings.monitoring import MonitoringSettings
from settings.network import InfinibandSettings, IpoibNetwork, NetworkSettings
from settings.nodes import GpuSpec, InfinibandSpec, NasDrive, NasHost, NasSettings, NodeSettings, NvmeDevice, OsdDevice
from settings.root import NAMESPACE, Settings, SettingsError
from settings.rules import settings_warnings
from settings.scheduling import SchedulingSettings
from settings.secrets import SECRET_KEYS, StackSecrets, plain_secret_problems
from settings.storage import (
    BackupSource,
    CephfsBackup,
    CephNetwork,
    CephSettings,
    MinioArtifact,
    MinioHostLoss,
    MinioSettings,
    StorageSettings,
)

__all__ = [
    "NAMESPACE",
    "SECRET_KEYS",
    "BackupSource",
    "Bastion",
    "CephNetwork",
    "CephSettings",
    "CephfsBackup",
    "Chart",
    "Charts",
    "ClusterSettings",
    "ClusterUpgrade",
    "EtcdSnapshots",
    "GpuDriver",
    "GpuSettings",
    "GpuSpec",
    "InfinibandSettings",
    "InfinibandSpec",
    "IpoibNetwork",
    "MinioArtifact",
    "MinioHostLoss",
    "MinioSettings",
    "MonitoringSettings",
    "NasDrive",
    "NasHost",
    "NasSettings",
    "NetworkSettings",
    "NodeSettings",
    "NvmeDevice",
    "OsdDevice",
    "Rke2Install",
    "SchedulingSettings",
    "Settings",
    "SettingsError",
    "SshSettings",
    "StackSecrets",
    "StorageSettings",
    "Tier1Settings",
    "TimeSlicing",
    "VirtualIp",
    "load",
    "plain_secret_problems",
    "settings_warnings",
]
