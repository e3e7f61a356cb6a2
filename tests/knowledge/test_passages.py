"""Markdown → passages, and the tokenizer."""

from __future__ import annotations

from ongrid_knowledge.passages import split_markdown
from ongrid_knowledge.tokens import tokenize

DOC = """\
---
title: Runbook title from front matter
tags: [disk, storage]
---
Intro before any heading.

# Heading one

Text of one.

## Two

```sh
# not a heading: a shell comment
du -xh /var
```

### Three

Text of three.

## Empty

## Four
Text of four.
"""


def test_sections_headings_and_lines():
    doc = split_markdown(DOC, "kb/doc.md", default_title="doc")
    assert doc.title == "Runbook title from front matter"
    got = [(p.section, p.line) for p in doc.passages]
    assert got == [
        ("Runbook title from front matter", 5),
        ("Heading one", 7),
        ("Heading one › Two", 11),
        ("Heading one › Two › Three", 18),
        ("Heading one › Four", 24),
    ]
    two = doc.passages[2]
    assert "# not a heading: a shell comment" in two.text
    assert two.tags == ("disk", "storage")
    assert DOC.splitlines()[two.line - 1] == "## Two"


def test_title_from_h1_then_file_name():
    assert split_markdown("# Real title\n\ntext\n", "x.md", default_title="x").title == "Real title"
    assert split_markdown("just text\n", "x.md", default_title="x").title == "x"
    assert split_markdown("", "x.md", default_title="x").passages == ()


def test_bad_front_matter_is_a_note_and_the_body_still_counts():
    doc = split_markdown("---\ntitle: [unclosed\n---\n# T\n\nbody\n", "kb/bad.md", default_title="bad")
    assert doc.title == "T"
    assert doc.notes and doc.notes[0].startswith("kb/bad.md:") and "front matter is not valid YAML" in doc.notes[0]
    assert [p.text for p in doc.passages] == ["# T\n\nbody"]


def test_long_sections_are_cut_at_blank_lines():
    paragraphs = "\n\n".join(f"paragraph {i} " + "x" * 80 for i in range(30))
    doc = split_markdown(f"# Long\n\n{paragraphs}\n", "long.md", default_title="long", max_chars=500)
    assert len(doc.passages) > 3
    assert all(len(p.text) <= 500 for p in doc.passages)
    assert {p.section for p in doc.passages} == {"Long"}
    joined = "\n\n".join(p.text for p in doc.passages)
    assert all(f"paragraph {i} " in joined for i in range(30))


def test_tokenizer_stems_english_drops_stop_words_and_bigrams_cjk():
    assert tokenize("The restarting of NGINX workers") == ["restart", "nginx", "worker"]
    assert tokenize("ＤＩＳＫ") == ["disk"]
    assert tokenize("磁盘已满") == ["磁盘", "盘已", "已满"]
    assert tokenize("盘") == ["盘"]
    assert tokenize("nginx重启") == ["nginx", "重启"]
