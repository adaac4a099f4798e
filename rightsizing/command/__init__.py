"""The ``rightsizer`` command: ``plan`` (GPUs for a model, from its size) and ``report`` (a fleet's
verdicts, recommendations and savings from Prometheus history), both on the right-sizing engine.

``cli`` parses the command line; ``plan_cli`` and ``report_cli`` run the subcommands; ``promapi``
queries Prometheus; ``report*`` assemble and write the report; ``output`` formats tables, CSV and
JSON; ``exporter_config`` reads the engine's sections of the exporter's configuration file.
"""
