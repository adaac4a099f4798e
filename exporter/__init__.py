"""Rightsizer's per-node exporter: GPU samples under dcgm-exporter's names, plus right-sizing scores."""

import os

from rightsizer_core.early import exit_quietly_while_importing

exit_quietly_while_importing("rightsizer-exporter")  # before anything heavy is imported

from rightsizer_core import __version__ as __version__  # noqa: E402

# aiohttp keeps its signal handlers in frozenlist's FrozenList, whose compiled build is C++: loading it
# maps libstdc++, about 1 MiB of resident pages, for a list read at start-up and shutdown. The
# library's own switch selects its pure-Python FrozenList (same class and behaviour); set before
# anything imports aiohttp, and only when the environment does not choose already.
os.environ.setdefault("FROZENLIST_NO_EXTENSIONS", "1")
