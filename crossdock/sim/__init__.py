"""Trace-driven cluster simulator: static packing (FGD paper) and dynamic replay.

It places pods through pure scoring functions with a virtual clock and no Redis or backends:
``trace`` loads the Alibaba GPU trace, ``sampling`` builds the arrival sequence, ``cluster``
holds free capacity, ``policies`` scores nodes, ``static`` and ``dynamic`` run the two modes,
``plot`` draws charts. See docs/simulation.md.
"""
