"""AcceptanceChecks (`component.py`): the checks that run after every `up` as Kubernetes Jobs, and their
scripts (`checks/`)."""
