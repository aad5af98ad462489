"""Slurm backend: one ``SlurmBackend`` over a driver (``CliDriver`` or ``RestDriver``)."""

from crossdock.backends.slurm.backend import Inventory, JobStatus, NodeInventory, SlurmBackend
from crossdock.backends.slurm.cli import CliDriver
from crossdock.backends.slurm.driver import (
    SlurmDriver,
    SlurmError,
    SlurmUnavailable,
    SubmitRejected,
    SubmitRequest,
    Unsupported,
)
from crossdock.backends.slurm.rest import RestDriver
from crossdock.backends.slurm.states import SLURM_STATES, decode_wait_status, translate

__all__ = [
    "SLURM_STATES", "CliDriver", "Inventory", "JobStatus", "NodeInventory", "RestDriver", "SlurmBackend",
    "SlurmDriver", "SlurmError", "SlurmUnavailable", "SubmitRejected", "SubmitRequest", "Unsupported",
    "decode_wait_status", "translate",
]
