"""A model's Markdown answer as the pieces the chat shows: prose as HTML in the subset Qt's rich
text understands, and each top-level code block apart (its language, its source for the copy
button, and its source highlighted by Pygments).

Raw HTML in an answer is shown as text, never interpreted. A code block still being written (no
closing fence yet) is a code block already, so a streaming answer does not flicker between prose
and code. Plain Python: the window turns the pieces into widgets.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound


@dataclass(frozen=True)
class Colors:
    """What the HTML needs from the theme."""

    code_bg: str = "#f6f8fa"
    inline_code_bg: str = "#eef1f0"
    border: str = "#dde5e1"
    pygments: str = "default"  # a Pygments style name

    @classmethod
    def from_theme(cls, theme: dict[str, str]) -> Colors:
        return cls(theme.get("code_bg", cls.code_bg), theme.get("inline_code_bg", cls.inline_code_bg),
                   theme.get("border", cls.border), theme.get("pygments", cls.pygments))


@dataclass(frozen=True)
class Prose:
    html: str
    line: int = 0  # the first source line of its block


@dataclass(frozen=True)
class Code:
    source: str
    language: str  # as written after the fence ("" when none)
    html: str  # the source highlighted, as <pre>; plain when highlighting is off
    closed: bool  # False while the closing fence has not arrived
    line: int = 0  # the line of its opening fence


Piece = Prose | Code


@lru_cache(maxsize=4)
def _parser(colors: Colors, highlighted: bool) -> MarkdownIt:
    def nested_fence(code: str, lang: str, _attrs: str) -> str:  # fences inside lists and quotes
        return code_html(code, lang, colors, highlighted, background=colors.code_bg)

    return MarkdownIt("commonmark", {"html": False, "highlight": nested_fence}).enable(["table", "strikethrough"])


@lru_cache(maxsize=16)
def _formatter(style: str) -> HtmlFormatter:
    return HtmlFormatter(nowrap=True, noclasses=True, style=style)


@lru_cache(maxsize=64)
def _lexer(language: str) -> Lexer:
    try:
        return get_lexer_by_name(language.lower(), stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def language_of(info: str) -> str:
    """The language named after a fence (```python title="x" → python)."""
    return info.strip().split(maxsplit=1)[0] if info.strip() else ""


@lru_cache(maxsize=256)  # a streaming answer renders its finished blocks again at every paint
def code_html(code: str, language: str, colors: Colors, highlighted: bool = True, background: str = "") -> str:
    code = code.removesuffix("\n")
    if highlighted and language:
        body = highlight(code, _lexer(language_of(language)), _formatter(colors.pygments)).removesuffix("\n")
    else:
        body = html.escape(code)
    fill = f"background-color:{background}; " if background else ""
    return f'<pre style="{fill}margin:0; white-space:pre">{body}</pre>'


_TABLE = ('<table border="1" cellspacing="0" cellpadding="6" '
          'style="border-collapse:collapse; border-style:solid; border-color:{}">')
_ALIGN = re.compile(r'<(t[hd]) style="text-align:(left|right|center)">')
_HEAD = re.compile(r'<th( align="(?:left|right|center)")?>')


def _qt_html(text: str, colors: Colors) -> str:
    """markdown-it's HTML with what Qt's rich text needs spelled out: inline code with a
    background, tables with borders, and header cells aligned like their column (Qt centres a
    bare <th>, so a left-aligned column's header would sit apart from its cells)."""
    text = text.replace("<code>", f'<code style="background-color:{colors.inline_code_bg}">')
    text = text.replace("<table>", _TABLE.format(colors.border))
    text = _ALIGN.sub(r'<\1 align="\2">', text)
    left = ' align="left"'
    return _HEAD.sub(lambda m: f'<th{m.group(1) or left} bgcolor="{colors.inline_code_bg}">', text)


def render(text: str, colors: Colors = Colors(), highlighted: bool = True, first_line: int = 0) -> list[Piece]:
    """The answer as pieces, in order: one per top-level block (a paragraph, a list, a table, a
    heading, a quote: Prose; a fenced block: Code), so a streaming answer re-renders only its last
    blocks (see `render_more`). `first_line` numbers the lines of a tail rendered on its own."""
    md = _parser(colors, highlighted)
    env: dict = {}
    tokens = md.parse(text, env)
    lines = text.split("\n")
    pieces: list[Piece] = []
    block: list = []
    for token in tokens:
        if token.type == "fence" and token.level == 0:
            start, end = token.map or (0, 0)
            last = lines[end - 1].strip() if end - 1 < len(lines) and end - start > 1 else ""
            closed = last.startswith(token.markup) and last.strip(token.markup[0]) == ""
            pieces.append(Code(token.content.removesuffix("\n"), language_of(token.info),
                               code_html(token.content, token.info, colors, highlighted), closed,
                               first_line + start))
            continue
        block.append(token)
        if token.level == 0 and token.nesting <= 0:  # a top-level block ends here
            line = next((t.map[0] for t in block if t.map), 0)
            pieces.append(Prose(_qt_html(md.renderer.render(block, md.options, env), colors), first_line + line))
            block = []
    if block:
        pieces.append(Prose(_qt_html(md.renderer.render(block, md.options, env), colors), first_line))
    return pieces


def render_more(before: list[Piece], old_text: str, text: str, colors: Colors = Colors(),
                highlighted: bool = True) -> list[Piece]:
    """`render(text)` for a text that grew from `old_text` (rendered as `before`): the blocks before
    the last two are kept and only the rest is parsed again, so a token's cost does not grow with
    the answer. (Two, not one: a new line can turn the last paragraph into a heading or a table
    header, or continue the list before it.) Anything but appending renders it all."""
    if len(before) < 3 or not text.startswith(old_text):
        return render(text, colors, highlighted)
    keep = len(before) - 2
    line = before[keep].line
    offset = 0
    for _ in range(line):
        offset = text.index("\n", offset) + 1
    return before[:keep] + render(text[offset:], colors, highlighted, first_line=line)


COMMON_LANGUAGES = ("python", "javascript", "typescript", "bash", "json", "c", "cpp", "rust", "go", "java",
                    "html", "css", "sql", "yaml")


def warm_up(languages: tuple[str, ...] = COMMON_LANGUAGES) -> None:
    """Compile the parser and the common lexers ahead of time (Python's lexer takes ~70 ms the first
    time, which would otherwise be a visible stall when a reply's first code block arrives)."""
    render("`x`\n\n| a |\n|---|\n| 1 |\n")
    for language in languages:
        list(_lexer(language).get_tokens("x"))
