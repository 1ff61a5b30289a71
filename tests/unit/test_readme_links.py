"""README.md is also the project's page on PyPI, where a relative link (``docs/x.md``) or
image leads nowhere: every link is absolute, and one into the repository names a file or
folder that exists (and a heading that exists in it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPO = "https://github.com/soloist-dev/soloist"
#: Where a link into the repository points, and the file it names after the prefix.
INTO_REPO = (
    f"{REPO}/blob/main/",
    f"{REPO}/tree/main/",
    f"{REPO.replace('github.com', 'raw.githubusercontent.com')}/main/",
)
#: [text](target), ![alt](target), [label]: target, <a href=...>, <img src=...>.
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)""", re.I)
CODE = re.compile(r"^```.*?^```[ \t]*$|`[^`\n]*`", re.S | re.M)


def links(markdown: str) -> list[str]:
    """The link and image targets of ``markdown``, outside code."""
    text = CODE.sub("", markdown)
    return [m for pattern in (INLINE, REFERENCE, HTML) for m in pattern.findall(text)]


def anchor(heading: str) -> str:
    """The anchor GitHub and mkdocs give a heading: lower case, punctuation dropped, spaces
    as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_links_are_absolute_and_lead_somewhere() -> None:
    """Every README link works on PyPI (https), and each into the repository names an
    existing path (and heading)."""
    found = links(README.read_text(encoding="utf-8"))
    assert found, "README.md has no links at all"
    relative = [t for t in found if not t.startswith("https://")]
    assert relative == [], f"README.md links that break on PyPI: {relative}"
    for target in found:
        prefix = next((p for p in INTO_REPO if target.startswith(p)), None)
        if prefix is None:
            assert target.rstrip("/") == REPO or not target.startswith(REPO), target
            continue
        path, _, fragment = target[len(prefix) :].partition("#")
        assert (ROOT / path).exists(), f"{target}: no {path} in the repository"
        if fragment:
            headings = re.findall(r"^#+\s+(.+)$", (ROOT / path).read_text(encoding="utf-8"), re.M)
            assert fragment in {anchor(h) for h in headings}, f"{target}: no such heading"


def test_the_link_finder_sees_every_kind_of_link() -> None:
    """Inline links, images, reference definitions and HTML are found; code is not."""
    text = (
        "[a](docs/a.md) ![b](img/b.png) <img src='c.png'> <a href=\"d.md\">d</a>\n"
        "[e]: e.md\n`[f](f.md)`\n```md\n[g](g.md)\n```\n"
    )
    assert sorted(links(text)) == ["c.png", "d.md", "docs/a.md", "e.md", "img/b.png"]
    assert anchor("PostgreSQL and psycopg") == "postgresql-and-psycopg"
    assert anchor("When etcd?") == "when-etcd"
