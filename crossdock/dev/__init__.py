"""Development helpers: local service clusters for tests, CI and benchmarks.

``slurm`` (a multi-node Slurm cluster) and ``k8s`` (a Kubernetes control plane with kwok
nodes), with the process helpers they share in ``proc``. No production module imports this
package (``tests/unit/test_dev_layering.py``).
"""
