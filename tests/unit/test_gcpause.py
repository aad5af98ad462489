"""The collector pause callers wrap a cycle in; the core itself never touches the collector."""

from __future__ import annotations

import gc

import pytest

from crossdock.gcpause import collection_paused


@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "already-disabled"])
def test_the_collector_is_paused_inside_and_left_as_it_was(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(RuntimeError), collection_paused():
            assert not gc.isenabled()
            raise RuntimeError("a failing cycle resumes the collector too")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
