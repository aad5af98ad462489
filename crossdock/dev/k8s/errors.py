"""The control plane's errors."""


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, reached or stopped."""


class MissingBinariesError(ControlPlaneError):
    """The binaries are not built yet (run ``python -m crossdock.dev.k8s build``)."""
