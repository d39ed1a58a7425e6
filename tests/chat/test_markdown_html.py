"""Answers as prose and code pieces: what Qt's rich text is given."""

from __future__ import annotations

from app.chat.markdown_html import Code, Colors, Prose, render, render_more

DARK = Colors(code_bg="#111415", inline_code_bg="#2a3130", border="#313a37", pygments="monokai")

ANSWER = """Use `range`:

```python
def f(n):
    return n * 2
```

Then call it."""


def test_code_blocks_are_pieces_of_their_own_with_language_and_source():
    pieces = render(ANSWER)
    assert [type(p) for p in pieces] == [Prose, Code, Prose]
    code = pieces[1]
    assert code.language == "python" and code.closed
    assert code.source == "def f(n):\n    return n * 2"
    assert "Then call it." in pieces[2].html


def test_code_is_highlighted_when_asked_and_plain_otherwise():
    on = render(ANSWER)[1].html
    off = render(ANSWER, highlighted=False)[1].html
    assert on.count("<span style=") >= 3 and "def" in on
    assert "<span" not in off and "return n * 2" in off
    assert render(ANSWER, DARK)[1].html != on  # the theme's Pygments style


def test_an_unknown_or_missing_language_is_shown_as_text():
    for fence in ("```klingon\nqapla' <b>\n```", "```\nx < y\n```"):
        code = render(fence)[0]
        assert isinstance(code, Code) and "&lt;" in code.html and "<span" not in code.html


def test_a_streaming_fence_is_code_already_and_closes_later():
    partial = render("Look:\n\n```js\nconst a = 1;\nconst")
    assert isinstance(partial[-1], Code) and not partial[-1].closed
    assert partial[-1].source == "const a = 1;\nconst"
    done = render("Look:\n\n```js\nconst a = 1;\n```")
    assert done[-1].closed and done[-1].source == "const a = 1;"


def test_raw_html_from_the_model_is_text():
    html = render('<img src="/etc/passwd"> <script>x()</script> **bold**')[0].html
    assert "<img" not in html and "<script" not in html and "&lt;img" in html and "<strong>bold</strong>" in html


def test_inline_code_has_a_background_and_tables_are_bordered_and_aligned():
    html = "".join(p.html for p in render("`x` and\n\n| a | b | c |\n|:--|--:|---|\n| 1 | 2 | 3 |", DARK))
    assert '<code style="background-color:#2a3130">x</code>' in html
    assert 'border-style:solid; border-color:#313a37' in html
    # each header cell aligned like its column, the unaligned one left like its cells
    assert '<th align="left" bgcolor="#2a3130">a</th>' in html
    assert '<th align="right" bgcolor="#2a3130">b</th>' in html and '<td align="right">2</td>' in html
    assert '<th align="left" bgcolor="#2a3130">c</th>' in html


def test_a_fence_inside_a_list_stays_in_the_prose_with_a_background():
    pieces = render("- step\n  ```sh\n  ls -l\n  ```\n- next")
    assert len(pieces) == 1 and isinstance(pieces[0], Prose)
    assert 'background-color:#f6f8fa' in pieces[0].html and "ls" in pieces[0].html


def test_empty_and_plain_text():
    assert render("") == []
    assert render("just words")[0].html.strip() == "<p>just words</p>"


STREAMED = ("Intro paragraph with `code`.\n\n- one\n- two\n  continued\n\n```python\ndef f():\n    return 1\n```\n\n"
            "| a | b |\n|---|--:|\n| 1 | 2 |\n\nA paragraph\nthat becomes a heading\n---\n\n3. three\n4. four\n\n"
            "> a quote\ncontinued lazily\n\nThe end.")


def test_one_piece_per_block_and_streaming_renders_only_the_tail_yet_equals_a_full_render():
    pieces = render(STREAMED)
    assert [type(p).__name__ for p in pieces] == ["Prose", "Prose", "Code", "Prose", "Prose", "Prose", "Prose",
                                                   "Prose"]
    assert "<h2>" in pieces[4].html and "<ol start=\"3\">" in pieces[5].html
    shown, text = [], ""
    for end in range(1, len(STREAMED) + 1, 2):  # as a reply streams in, two characters at a time
        new = STREAMED[:end]
        shown = render_more(shown, text, new)
        text = new
        assert shown == render(new), repr(new[-40:])
    kept = render_more(pieces, STREAMED, STREAMED + " More.")
    assert kept[:6] == pieces[:6] and all(a is b for a, b in zip(kept[:6], pieces[:6], strict=True))


def test_an_edit_that_is_not_an_append_renders_everything():
    before = render(STREAMED)
    assert render_more(before, STREAMED, "Different.") == render("Different.")
