"""What every config section shares: the strict base model and the bounds of what one cycle holds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# Bounds of what one scheduling cycle can hold (its arrays are int64, its clock a datetime):
# values beyond them are refused here, with the range, rather than overflowing in the service.
INT32 = 2**31 - 1
MAX_NODE_CPUS = 1 << 20
MAX_NODE_MEMORY_MIB = 1 << 40
"""1 EiB: int64 sums over a million nodes stay exact."""
MAX_NODE_GPUS = 4096
MAX_COUNT = 1_000_000
"""Node counts, queue lengths and replicas: far above any cluster, far below an overflow."""
YEAR_SECONDS = 365 * 86400


class _Cfg(BaseModel):
    # inf and nan are refused everywhere: a lease of .inf never expires, a nan compares false.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
