"""A real multi-node Slurm 22.05 cluster on this machine (see ``cluster``)."""

from crossdock.dev.slurm.cluster import *  # noqa: F401,F403
from crossdock.dev.slurm.cluster import main  # noqa: F401
