"""The REST API and its dashboard (``crossdock api``): FastAPI over the service's own functions,
so that a request is admitted, checked for ownership and refused exactly as the CLI's and the
Python API's calls are. :func:`crossdock.api.app.create_app` builds it; importing this package
loads nothing (the CLI's ``tokens`` command uses :mod:`crossdock.api.tokens` alone)."""
