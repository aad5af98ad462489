"""Deterministic simulation of the control plane: ``schedule.py`` runs one seeded schedule,
``world.py`` holds its clock, store, backend and message bus, ``bench/dst.py`` runs many."""
