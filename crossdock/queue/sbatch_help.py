"""``crossdock submit --help``: the options, laid out as ``sbatch --help`` lays out its own."""

from __future__ import annotations

import textwrap

from crossdock.queue.sbatch import OPTIONS, UNSUPPORTED, OptionDef
from crossdock.queue.sbatch_native import NATIVE

CROSSDOCK_OWN = frozenset("backend pool priority-class placement queue dry-run json".split())
_VALUE = {"required": "=value", "optional": "[=value]", "none": ""}


def _line(o: OptionDef) -> str:
    names = (f"-{o.short}, " if o.short else "    ") + f"--{o.long}{_VALUE[o.arg]}"
    return f"  {names:<30}{o.help}" if len(names) < 30 else f"  {names}\n  {'':<30}{o.help}"


def help_text() -> str:
    used = [o for o in OPTIONS if o.help != "ignored" and o.long not in CROSSDOCK_OWN and o.long not in NATIVE]
    own = [o for o in OPTIONS if o.long in CROSSDOCK_OWN]
    warned = sorted(f"--{o.long}" for o in OPTIONS if o.help == "ignored")
    wrap = lambda words: textwrap.fill(" ".join(words), width=88, initial_indent="  ", subsequent_indent="  ",
                                      break_on_hyphens=False)
    return "\n".join([
        "Usage: crossdock submit [OPTIONS...] [SCRIPT [ARGS...]]   (SCRIPT from standard input when omitted)",
        "",
        "sbatch's options, #SBATCH directives and SBATCH_* variables (the command line wins, then the",
        "environment, then the script). Every problem is reported at once.",
        "",
        "Options:",
        *(_line(o) for o in used),
        "",
        "crossdock's own:",
        *(_line(o) for o in own),
        "",
        "Accepted, with a warning that they have no effect:",
        wrap(warned),
        "",
        "Passed to Slurm as written (the job then runs only in pools with a Slurm partition):",
        wrap(f"--{n}" for n in NATIVE),
        "",
        "Refused, by name (crossdock does this another way; the message says how):",
        wrap(f"--{n}" for n in sorted(UNSUPPORTED)),
    ])
