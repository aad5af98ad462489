"""The local backend: this machine as one node, jobs as supervised subprocesses (``backend``,
``supervisor``; ``pyrun`` runs a Python call in the job)."""
