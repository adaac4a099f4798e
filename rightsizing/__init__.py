"""The right-sizing engine: pure maths over measurements (windows, evidence, verdicts, bottlenecks,
recommendations, cost), the GPU catalog and the model planner, plus the HTML building blocks
(``html_parts``) shared by the exporter's status page and the report.

Used by the exporter's live extension (``exporter.rightsizing_live``) and by the ``rightsizer``
command (``rightsizing.command``). Imports only ``rightsizer_core``: no server, no exporter.
"""
