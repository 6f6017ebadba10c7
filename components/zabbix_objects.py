"""Where deployed stacks find the Zabbix providers: their state names this module (pickled by reference).

The code lives in `components/monitoring/objects.py`; this name must stay importable for as long as a
stack's state may refer to it.
"""

from components.monitoring.objects import BootstrapProvider, ZabbixObjectProvider
from components.monitoring.reader import ApiTokenProvider

__all__ = ["ApiTokenProvider", "BootstrapProvider", "ZabbixObjectProvider"]
