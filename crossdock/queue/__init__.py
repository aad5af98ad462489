"""The pure scheduling core: models, states, sbatch parsing, config and the scheduling cycle.

Nothing in this package performs I/O beyond reading files it is handed; it imports only the
standard library, pydantic and numpy.
"""
