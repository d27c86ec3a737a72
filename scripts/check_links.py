#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown pages (README.md, DESIGN.md, docs/*.md).

    scripts/check_links.py [root]      (root: the repository, default this script's parent's)

Every link [text](target) whose target is not a URL must name a file or folder that exists,
relative to the page; a #fragment into a Markdown page must name one of its headings (as
GitHub makes their anchors: lower case, punctuation dropped, spaces as hyphens). Code spans
and fenced blocks are skipped. Prints each broken link as page:line: target (why) and exits
1 if there is one, else prints how many links it checked and exits 0.
"""
import pathlib
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")


def anchors(page):
    """The anchors GitHub gives the headings of a Markdown page."""
    found = set()
    counts = {}
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "")).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def check(page, root):
    broken = []
    checked = 0
    in_fence = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            checked += 1
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{where} (no heading #{fragment} in {dest.relative_to(root)})")
    return broken, checked


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent).resolve()
    pages = [root / "README.md", root / "DESIGN.md"] + sorted((root / "docs").glob("*.md"))
    broken, checked = [], 0
    for page in pages:
        if not page.exists():
            broken.append(f"{page.relative_to(root)}: missing")
            continue
        b, c = check(page, root)
        broken += b
        checked += c
    if broken:
        print("check_links: broken links:", file=sys.stderr)
        for b in broken:
            print("  " + b, file=sys.stderr)
        return 1
    print(f"check_links: {checked} relative links in {len(pages)} pages resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
