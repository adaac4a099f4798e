"""Code shared by the exporter and the adapter (neither imports the other).

``listener``: HTTP listeners that no client can exhaust (deadlines, size limits, a connection cap,
back-off when out of file descriptors); ``limits``: their settings; ``files``: reading files named by
the user (regular files only, size caps, bounded YAML); ``stopping``: SIGTERM/SIGINT at any point;
``argparsing``: command lines whose ``--help`` carries examples, environment and exit codes, and
which name the close flag for a mistyped one; ``settings``: typed configuration (YAML checked
against dataclass schemas, environment, flags); ``logs``: logfmt log lines; ``listen``: ``HOST:PORT``
parsing; ``workloads``: which workload a pod belongs to.
"""

# The project's version, as in pyproject.toml (a test keeps the two equal); the exporter and the adapter
# re-export it. Written here rather than read with importlib.metadata, whose import (with its email
# parsing) costs every process ~1 MiB.
__version__ = "0.1.0"
