"""Trace-driven cluster simulator: static packing (FGD paper) and dynamic replay.

It places pods through pure scoring functions with a virtual clock and no Redis or backends:
``trace`` loads the Alibaba GPU trace, ``sampling`` builds the arrival sequence, ``cluster``
holds free capacity, ``policies`` scores nodes, ``static`` and ``dynamic`` run the two modes,
``plot`` draws charts (matplotlib, imported when drawing); ``data/`` holds the default trace
(its README gives source, terms and checksums). It imports ``crossdock.queue`` only, and scores
crossdock's GPU placement with the live plugin's own functions (``policies.crossdock_scores``).
See docs/simulation.md.
"""
