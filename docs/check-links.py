#!/usr/bin/env python3
"""Checks every relative link, and every #anchor, in README.md and the book (docs/src/**.md,
with the files its chapters include), offline: the file a link names must exist, a link from a
chapter must stay inside docs/src (the built book holds nothing else), and an anchor must be a
heading of the file it names, slugged as GitHub and mdBook slug them. Every chapter file must be
in SUMMARY.md. Prints each broken link and exits 1 when there is one. Run from anywhere:
scripts/book runs it after building the book."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOOK = os.path.join(ROOT, "docs", "src")

FENCE = re.compile(r"^\s*(```|~~~)")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)(?::([A-Za-z0-9_-]+))?\s*\}\}")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_LINK = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.I)
HTML_ID = re.compile(r"""<[a-z]+\s[^>]*(?:id|name)=["']([^"']+)["']""", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def expand(path, seen=()):
    """The file's text with each {{#include}} replaced by what it includes (a book's view)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path in seen:
        return text

    def include(m):
        target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
        if not os.path.isfile(target):
            return m.group(0)  # reported as broken by links()
        body = expand(target, seen + (path,))
        if m.group(2):
            pattern = r"ANCHOR:\s*%s\b.*?\n(.*?)\n[^\n]*ANCHOR_END:\s*%s\b"
            found = re.search(pattern % (m.group(2), m.group(2)), body, re.S)
            body = found.group(1) if found else m.group(0)
        return body

    return INCLUDE.sub(include, text)


def prose_lines(text):
    """Lines outside fenced code blocks, with code spans blanked."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's and mdBook's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(path, cache={}):
    """Every anchor the file defines: its headings' slugs (numbered when repeated) and ids."""
    if path not in cache:
        found, counts = set(), {}
        text = expand(path)
        fenced = False
        for line in text.split("\n"):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
            found.update(HTML_ID.findall(line))
        cache[path] = found
    return cache[path]


def links(path):
    """(line, target, whether it is an include) of every link in the file, its includes
    expanded (an include left is one whose file is missing)."""
    text = expand(path)
    for number, line in prose_lines(text):
        for m in INCLUDE.finditer(line):
            yield number, m.group(1), True
        for pattern in (INLINE_LINK, REFERENCE, HTML_LINK):
            for target in pattern.findall(line):
                yield number, target, False


def check(path, problems):
    in_book = path.startswith(BOOK + os.sep)
    for number, target, included in links(path):
        if SCHEME.match(target) or target.startswith("//"):
            continue
        where = "%s:%d: %s" % (os.path.relpath(path, ROOT), number, target)
        file_part, _, anchor = target.partition("#")
        resolved = path if not file_part else os.path.normpath(
            os.path.join(os.path.dirname(path), file_part)
        )
        if not os.path.exists(resolved):
            problems.append("%s: no such file" % where)
            continue
        if in_book and not included and not resolved.startswith(BOOK + os.sep):
            problems.append("%s: outside docs/src, not in the built book" % where)
            continue
        if anchor:
            if not resolved.endswith(".md"):
                problems.append("%s: an anchor into a file that is not Markdown" % where)
            elif anchor not in anchors(resolved):
                problems.append("%s: no heading makes the anchor #%s" % (where, anchor))


def main():
    files = [os.path.join(ROOT, "README.md")]
    for folder, _, names in os.walk(BOOK):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    problems = []
    for path in files:
        check(path, problems)
    summary = os.path.join(BOOK, "SUMMARY.md")
    listed = {os.path.normpath(os.path.join(BOOK, t.partition("#")[0])) for _, t, _ in links(summary)}
    for path in files:
        if path.startswith(BOOK + os.sep) and path != summary and path not in listed:
            problems.append("%s: not in SUMMARY.md" % os.path.relpath(path, ROOT))
    for problem in problems:
        print(problem)
    print("links: %d files checked, %d broken" % (len(files), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
