"""The pure scheduling core: models, states, sbatch parsing, config and the scheduling cycle.

Nothing in this package performs I/O (files are read by ``crossdock.configfile``) or touches
process-wide state; it imports only the standard library, pydantic and numpy, and no module of
it imports back another in a circle (pyproject.toml's import contracts, checked by
``tests/unit/test_import_contracts.py``).
"""
