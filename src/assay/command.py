"""The `assay` console script: the CLI (`assay.cli`), with Ctrl-C handled from the first moment.

`assay.cli` takes a second or more to import; a Ctrl-C in that time, or a second one while an
interrupted run is already stopping, would otherwise end in a Python traceback. This module
imports nothing heavy, so it is in place before any of that starts.
"""

from __future__ import annotations

import sys

#: The exit code of a command stopped by Ctrl-C (as `assay.cli.common.EXIT_INTERRUPTED`).
EXIT_INTERRUPTED = 130


def main() -> None:
    try:
        from assay.cli import app

        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
