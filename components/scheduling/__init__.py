"""SchedulingStack (`stack.py`): Kueue and Volcano, the teams' namespaces, queues, quotas and RBAC."""
