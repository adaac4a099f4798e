"""Pieces shared by Rightsizer's HTML documents (the exporter's status page and ``rightsizer report
--format html``): the style sheet, inline SVG charts and the formatting of cells. Every value from
outside passes through ``cells.e`` (``html.escape``)."""
