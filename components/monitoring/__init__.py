"""ZabbixMonitoring (`component.py`): the Zabbix server, web, database and agents, and what Zabbix watches as
tracked state: the API client (`api.py`), the object kinds (`kinds.py`), the dynamic providers (`objects.py`),
the dashboards (`dashboards.py`), the templates (`templates/`), the agent's user parameters and the NAS
hosts' agent script (`scripts/zabbix-agent2-nas.sh`)."""
