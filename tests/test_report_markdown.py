"""``rightsizer report --format markdown`` parsed as a pull request shows it (CommonMark with
GitHub's tables, by markdown-it-py): one table per section, no HTML, the JSON report's rows in the
same order, and label values made of HTML or Markdown kept as the plain text they are."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token
from report_files import Written

SECTIONS = [
    "Summary", "Workloads, most money first", "Cost per inference", "GPUs",
    "Assumptions", "Thresholds", "Prices",
]  # fmt: skip



def _text(inline: Token) -> str:
    return "".join(c.content for c in inline.children or () if c.type in ("text", "code_inline"))


def sections(markdown: str) -> dict[str, list[list[dict[str, str]]]]:
    """Per level-2 heading, its tables as rows of {header: cell text}. Fails on any HTML."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    html = [t for t in tokens if t.type == "html_block"]
    html += [c for t in tokens for c in t.children or () if c.type == "html_inline"]
    assert html == [], "the Markdown report holds no HTML"
    out: dict[str, list[list[dict[str, str]]]] = {}
    current = None
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "heading_open" and t.tag == "h2":
            current = _text(tokens[i + 1])
            out[current] = []
        elif t.type == "table_open":
            assert current is not None, "a table before the first section"
            rows: list[list[str]] = []
            j = i
            while tokens[j].type != "table_close":
                if tokens[j].type == "tr_open":
                    rows.append([])
                elif tokens[j].type == "inline":
                    rows[-1].append(_text(tokens[j]))
                j += 1
            header, body = rows[0], rows[1:]
            assert all(len(r) == len(header) for r in body), "a cell split a row"
            out[current].append([dict(zip(header, r, strict=True)) for r in body])
            i = j
        i += 1
    return out


def test_one_table_per_section_with_the_json_rows(fleet: Written) -> None:
    data = fleet.json
    found = sections(fleet.markdown)
    assert data["inference_costs"], "the mixed fleet's vLLM server counts its tokens"
    assert list(found) == SECTIONS
    costs = found["Cost per inference"][0]
    want = [(c["queue"], c["server"]) for c in data["inference_costs"]]
    assert [(r["Queue"], r["Server"]) for r in costs] == want
    assert all(len(tables) == 1 for tables in found.values()), {k: len(v) for k, v in found.items()}
    gpus = found["GPUs"][0]
    assert [(r["UUID"], r["Model"], r["Verdict"], r["Recommended"]) for r in gpus] == [
        (g["uuid"], g["model"] + (f" {g['mig_profile']}" if g["mig_profile"] else ""), g["verdict"],
         g["workload_change"] or g["recommended"])
        for g in data["gpus"]
    ]  # fmt: skip
    workloads = found["Workloads, most money first"][0]
    assert [(r["Namespace"], r["Workload"], int(r["GPUs"])) for r in workloads] == [
        (w["namespace"] or "-", w["workload"], w["gpus"]) for w in data["workloads"]
    ]
    summary = {r["Figure"]: r["Value"] for r in found["Summary"][0]}
    assert summary["GPUs judged"] == str(data["totals"]["gpus"])
    assert summary["Right-sizing saves"].startswith(f"${data['totals']['hourly_savings_dollars']:,.2f}/h (")
    thresholds = [r["Setting"] for r in found["Thresholds"][0]]
    assert thresholds == [t["setting"] for t in data["assumptions"]["thresholds"]]
    assert [r["GPU"] for r in found["Prices"][0]] == [p["gpu"] for p in data["assumptions"]["prices"]]


def test_label_values_stay_plain_text(hostile: Written) -> None:
    found = sections(hostile.markdown)
    assert "Cost per inference" not in found  # no inference server counts tokens there: no empty table
    gpus = found["GPUs"][0]
    scenario = hostile.fleets[0].source.scenario
    pods = {g.pod.pod: g.pod.namespace for g in scenario.gpus if g.pod is not None}
    assert {r["Pod"]: r["Namespace"] for r in gpus} == pods
    assert [r["Verdict"] for r in gpus] == [g["verdict"] for g in hostile.json["gpus"]]


def test_a_pipe_or_markup_in_a_value_keeps_its_cell() -> None:
    from rightsizing.command.report_markdown import md_table

    values = ["a|b", "*bold* _it_ `code`", "[link](http://x)", "back\\slash", "two\nlines", "&lt;"]
    parsed = sections("## T\n\n" + md_table(["v"], [[v] for v in values]) + "\n")
    assert [r["v"] for r in parsed["T"][0]] == [" ".join(v.split()) for v in values]
