"""Development helpers: local service clusters for tests, CI and benchmarks."""
