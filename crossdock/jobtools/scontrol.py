"""``scontrol`` inside a job crossdock runs itself: the hostlist commands scripts use.

``scontrol show hostnames [LIST]`` prints one host per line (``LIST`` or, without it,
``$SLURM_JOB_NODELIST``); ``scontrol show hostlist LIST`` (or ``hostlistsorted``) compresses
a comma list back to a hostlist. Anything else is refused with a line saying what there is.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a file by bin/scontrol
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the directory that holds crossdock

import os
from collections.abc import Sequence

from crossdock.queue.hostlist import HostlistError, compress_hostlist, expand_hostlist

USAGE = ("scontrol: inside a crossdock job only 'scontrol show hostnames [LIST]' and"
         " 'scontrol show hostlist LIST' are provided; use 'crossdock show' for the rest")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in args if not a.startswith("-")]  # -o/--oneliner and the like change nothing here
    if len(words) < 2 or words[0] != "show" or words[1] not in ("hostnames", "hostname", "hostlist", "hostlistsorted"):
        print(USAGE, file=sys.stderr)
        return 1
    what, rest = words[1], words[2:]
    text = ",".join(rest) if rest else os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        print(f"scontrol: error: give a hostlist: scontrol show {what} LIST"
              " (SLURM_JOB_NODELIST is not set)", file=sys.stderr)
        return 1
    try:
        hosts = expand_hostlist(text)
    except HostlistError as exc:
        print(f"scontrol: error: {exc}", file=sys.stderr)
        return 1
    if what.startswith("hostlist"):
        print(compress_hostlist(sorted(hosts) if what == "hostlistsorted" else hosts))
    else:
        print("\n".join(hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
