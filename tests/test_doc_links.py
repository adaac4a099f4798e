"""Every link in README.md and docs/*.md resolves: a relative link names a file or folder of the
repository, and its ``#anchor`` a heading of the target Markdown file, as GitHub computes heading
anchors; an absolute link is a well-formed http(s) URL (not fetched: the suite runs offline)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from servers import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target); the target may be followed by a "title".
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)]*)\)")
_TITLE = re.compile(r"\s+\"[^\"]*\"\s*$")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose_lines(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with code spans blanked unless told not to."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker and (fence is None or marker[1].startswith(fence)):
            fence = marker[1][:3] if fence is None else None
            continue
        if fence is None:
            lines.append((number, _CODE_SPAN.sub("", line) if blank_code else line))
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup and punctuation dropped, lower case, each space a
    hyphen (letters, digits, ``-`` and ``_`` kept, Unicode letters included)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file: heading slugs (repeats numbered -1, -2, … as GitHub does)
    and explicit HTML anchors."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = path.read_text()
    for _, line in prose_lines(text, blank_code=False):
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if not heading:
            continue
        slug = github_slug(heading[2].replace("`", ""))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(text: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for number, line in prose_lines(text):
        found += [(number, _TITLE.sub("", m[1]).strip().strip("<>")) for m in _INLINE_LINK.finditer(line)]
        definition = _REFERENCE_DEFINITION.match(line)
        if definition:
            found.append((number, definition[1]))
    return found


def problems(path: Path) -> list[str]:
    """What is wrong with each link of ``path``, one string per broken link."""
    found: list[str] = []
    for number, target in links(path.read_text()):
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not target or re.search(r"\s", target):
            found.append(f"{where}: not a link target (empty, or with a space)")
            continue
        parts = urlsplit(target)
        if parts.scheme in ("http", "https"):
            if not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?", parts.netloc):
                found.append(f"{where}: not a well-formed URL")
            continue
        if parts.scheme or parts.netloc:
            found.append(f"{where}: only relative links and http(s) URLs are expected")
            continue
        file = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if not file.exists():
            found.append(f"{where}: no such file")
            continue
        if ROOT.resolve() not in file.parents and file != ROOT.resolve():
            found.append(f"{where}: outside the repository")
            continue
        if parts.fragment:
            if file.suffix != ".md":
                found.append(f"{where}: an anchor into a file that is not Markdown")
            elif unquote(parts.fragment) not in anchors(file):
                found.append(f"{where}: no heading with that anchor in {file.relative_to(ROOT.resolve())}")
    return found


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(path: Path) -> None:
    assert problems(path) == []


def test_the_links_are_found() -> None:
    # The README reaches every document through its links; none found would be a parser gone blind.
    targets = {target.split("#")[0] for _, target in links((ROOT / "README.md").read_text())}
    assert {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"} <= targets


def test_slugs_are_githubs() -> None:
    # Anchors GitHub renders for headings of this repository's kind.
    assert github_slug("Profiling ratios (GPM)") == "profiling-ratios-gpm"
    assert github_slug("rightsizer plan") == "rightsizer-plan"
    assert github_slug("From nothing to autoscaling on queue depth (no GPU needed)") == (
        "from-nothing-to-autoscaling-on-queue-depth-no-gpu-needed"
    )
    assert github_slug("NVML path next to nvitop-exporter") == "nvml-path-next-to-nvitop-exporter"
    assert github_slug("Migrating from prometheus-adapter") == "migrating-from-prometheus-adapter"
    assert github_slug("Queue depth: keys & kinds") == "queue-depth-keys--kinds"
    assert github_slug("pod_labels and über") == "pod_labels-and-über"
    assert "rightsizer-plan" in anchors(ROOT / "docs" / "rightsizing.md")  # from "## `rightsizer plan`"


def test_broken_links_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Two words\n\n## Two words\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n"
        "[ok](docs/a.md#two-words) [ok, second](docs/a.md#two-words-1) [ok, here](#title)\n"
        "[no file](docs/b.md) [no anchor](docs/a.md#three-words) [spaced](https://exa mple.com/)\n"
        "[no host](https:///path) [ok url](https://example.com/a?b=c#d)\n"
        "`[in code](nowhere.md)`\n"
        "```\n[in a fence](nowhere.md)\n```\n"
        "[ref]: docs/missing.md\n"
    )
    assert [p.split(": ", 1)[1] for p in problems(page)] == [
        "docs/b.md: no such file",
        "docs/a.md#three-words: no heading with that anchor in docs/a.md",
        "https://exa mple.com/: not a link target (empty, or with a space)",
        "https:///path: not a well-formed URL",
        "docs/missing.md: no such file",
    ]


# A repository path in a code span (`deploy/examples/hpa-pod-gpu.yaml`) is a reference too: when
# files move, the text naming them must follow.
_PATH_SPAN = re.compile(
    r"`((?:deploy|dashboards|bench|scripts|docs|tests|exporter|adapter|rightsizer_core|rightsizing)/[\w./*-]*)`"
)
NOT_OURS = {("docs/prometheus-adapter.md", "docs/sample-config.yaml")}  # prometheus-adapter's own file


def missing_paths(path: Path) -> list[str]:
    relative = path.relative_to(ROOT).as_posix()
    return [
        m for m in missing_paths_in(path, path.read_text()) if (relative, m.split(": ", 1)[1]) not in NOT_OURS
    ]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_repository_path_named_exists(path: Path) -> None:
    assert missing_paths(path) == []


def test_a_moved_file_is_noticed(tmp_path: Path) -> None:
    text = (
        (ROOT / "docs" / "README.md").read_text()
        + "\nThe catalog is `exporter/nowhere/catalog.yaml`; see `bench/`, `deploy/*/kustomization.yaml`.\n"
    )
    moved = tmp_path / "page.md"
    moved.write_text(text)
    found = [m.split(": ", 1)[1] for m in missing_paths_in(moved, text)]
    assert found == ["exporter/nowhere/catalog.yaml"]


def missing_paths_in(path: Path, text: str) -> list[str]:
    return [
        f"{path.name}:{number}: {m[1]}"
        for number, line in prose_lines(text, blank_code=False)
        for m in _PATH_SPAN.finditer(line)
        if not list(ROOT.glob(m[1].rstrip("/")))
    ]
