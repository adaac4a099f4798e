"""Code shared by the exporter and the adapter (neither imports the other).

``listener``: HTTP listeners that no client can exhaust (deadlines, size limits, a connection cap,
back-off when out of file descriptors); ``limits``: their settings; ``files``: reading files named by
the user (regular files only, size caps, bounded YAML); ``stopping``: SIGTERM/SIGINT at any point;
``argparsing``: command lines whose ``--help`` carries examples, environment and exit codes, and
which name the close flag for a mistyped one.
"""
