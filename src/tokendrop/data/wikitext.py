"""Wikipedia markup removal: :func:`clean_wikitext` turns a page's wikitext into plain prose
paragraphs (used by the Wikipedia XML dump reader of :mod:`.corpus`)."""

from __future__ import annotations

import html
import re

REDIRECT = re.compile(r"\s*#\s*redirect", re.I)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
# elements dropped with their content (references, math, code listings, galleries, ...)
_DROP_ELEMS = (
    "ref|references|math|chem|ce|gallery|timeline|syntaxhighlight|source|pre|score|imagemap|graph|"
    "mapframe|maplink|templatedata|hiero|inputbox|categorytree|noinclude|table"
)
_SELF_CLOSING = re.compile(rf"<\s*(?:{_DROP_ELEMS})\b[^<>]*/\s*>", re.I)
_PAIRED = re.compile(rf"<\s*({_DROP_ELEMS})\b[^<>]*>.*?<\s*/\s*\1\s*>", re.I | re.S)
_BR = re.compile(
    r"<\s*br\s*/?\s*>|<\s*/?\s*(?:p|div|li|ul|ol|hr|blockquote|center|poem)\b[^<>]*>", re.I
)
_ANY_TAG = re.compile(r"<\s*/?\s*[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?/?\s*>")
_INNER_TEMPLATE = re.compile(r"\{\{([^{}]*)\}\}", re.S)
_EXT_LINK = re.compile(r"\[(?:https?:|ftp:|mailto:|news:|irc:|//)[^\s\]]*(?:\s+([^\]]*))?\]", re.I)
_BARE_URL = re.compile(r"\b(?:https?|ftp)://\S+", re.I)
# innermost [[...]]: content without "[[" / "]]"; single-bracket groups such as "[1900]" are atoms,
# so "[[File:x|caption [1900]]]" closes at the right place (alternatives are disjoint: no
# backtracking blow-up)
_INNER_LINK = re.compile(r"\[\[((?:[^\[\]]|\[[^\[\]]*\]|\[(?!\[|[^\[\]]*\])|\](?!\]))*)\]\]")
_BOLD_ITALIC = re.compile(r"'{2,5}")
_MAGIC = re.compile(r"__[A-Z]+__")
_HEADING = re.compile(r"^\s*(={1,6})\s*(.*?)\s*\1\s*$")
_LIST = re.compile(r"^[*#:;]+\s*")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u202f\u205f\u3000]+")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?)\]])")
_EMPTY_PARENS = re.compile(r"\(\s*(?:[,;:\-–—]\s*)*\)|\[\s*\]")
_PAREN_LEAD_PUNCT = re.compile(r"\(\s*[,;:]\s*")
_DUP_PUNCT = re.compile(r"([,;])(?:\s*[,;])+")
_LANG_PREFIX = re.compile(r"^[a-z]{2,3}(?:-[a-z0-9]+)*:")
_DROP_NS = ("file", "image", "media", "category")
_VISIBLE_INTERWIKI = {
    "w",
    "wikipedia",
    "wikt",
    "wiktionary",
    "s",
    "wikisource",
    "b",
    "wikibooks",
    "q",
    "wikiquote",
    "n",
    "wikinews",
    "v",
    "wikiversity",
    "voy",
    "wikivoyage",
    "species",
    "wikispecies",
    "commons",
    "c",
    "meta",
    "m",
    "mw",
    "d",
    "wikidata",
}
_SKIP_SECTIONS = {
    "see also",
    "references",
    "external links",
    "further reading",
    "notes",
    "bibliography",
    "sources",
    "citations",
    "notes and references",
    "references and notes",
    "footnotes",
    "works cited",
    "literature",
    "external link",
    "reference",
    "note",
    "general references",
    "cited sources",
}
# inline templates whose text is part of the sentence; every other template is removed
_INLINE_TEMPLATES = {
    "nowrap",
    "nobr",
    "small",
    "smaller",
    "big",
    "larger",
    "sic",
    "lang",
    "transl",
    "transliteration",
    "nihongo",
    "ill",
    "interlanguage link",
    "interlanguage link multi",
    "not a typo",
    "abbr",
    "em",
    "strong",
    "mvar",
    "math",
    "var",
    "keypress",
    "samp",
    "as written",
}
_DASH_TEMPLATES = {
    "ndash": "–",
    "mdash": "—",
    "snd": " – ",
    "spaced ndash": " – ",
    "spnd": " – ",
    "'": "'",
    "\"'": "\"'",
    "'\"": "'\"",
    "`": "'",
    "!": "|",
    "=": "=",
    "nbsp": " ",
}


def _expand_template(m: re.Match) -> str:
    body = m.group(1)
    parts = [p.strip() for p in body.split("|")]
    name = parts[0].lower().replace("_", " ").strip()
    if name in _DASH_TEMPLATES:
        return _DASH_TEMPLATES[name]
    pos = [p for p in parts[1:] if "=" not in p]
    if name in ("convert", "cvt") and len(pos) >= 2:
        # {{convert|5|km|mi}} -> "5 km"; {{convert|5|to|7|km}} -> "5 to 7 km"
        if len(pos) >= 4 and pos[1] in ("to", "-", "and", "or", "by", "x", "×", "–"):
            return f"{pos[0]} {pos[1]} {pos[2]} {pos[3]}"
        return f"{pos[0]} {pos[1]}"
    if name in _INLINE_TEMPLATES and pos:
        if name in ("lang", "transl", "transliteration"):
            return pos[-1]
        if name == "nihongo":
            return pos[0]
        return pos[0]
    return ""


def _strip_templates(text: str) -> str:
    for _ in range(50):  # innermost first; nesting depth bounds the number of passes
        new = _INNER_TEMPLATE.sub(_expand_template, text)
        if new == text:
            break
        text = new
    if "{{" in text:  # unbalanced or with stray single braces: brace-counting fallback
        text = _strip_balanced(text, "{{", "}}")
    return text


def _strip_balanced(text: str, open_: str, close_: str) -> str:
    """Remove ``open_ ... close_`` spans, nesting-aware, in one pass.

    Unmatched openers and stray closers are dropped alone (the text around them is kept).
    """
    tok = re.compile(re.escape(open_) + "|" + re.escape(close_))
    stack: list[int] = []
    cuts: list[tuple[int, int]] = []
    for m in tok.finditer(text):
        if m.group() == open_:
            stack.append(m.start())
        elif stack:
            cuts.append((stack.pop(), m.end()))  # nested pairs are swallowed by the merge below
        else:
            cuts.append((m.start(), m.end()))  # stray closer
    # openers never closed: drop them alone, and keep what lies between them
    cuts += [(start, start + len(open_)) for start in stack]
    cuts.sort()
    out = []
    pos = 0
    for a, b in cuts:
        if b <= pos:
            continue
        out.append(text[pos : max(a, pos)])
        pos = b
    out.append(text[pos:])
    return "".join(out)


def _strip_tables(lines: list[str]) -> list[str]:
    out = []
    depth = 0
    for line in lines:
        s = line.lstrip(" :")
        if s.startswith("{|"):
            depth += 1
            continue
        if depth:
            if s.startswith("|}"):
                depth -= 1
            continue
        out.append(line)
    return out


def _link(m: re.Match) -> str:
    inner = m.group(1)
    target, sep, label = inner.partition("|")
    target = target.strip()
    visible = target.startswith(":")
    t = target.lstrip(":").strip()
    low = t.lower()
    prefix = low.split(":", 1)[0].strip() if ":" in low else ""
    if not visible:
        if prefix in _DROP_NS:
            return ""
        if prefix and prefix not in _VISIBLE_INTERWIKI and _LANG_PREFIX.match(low) and not sep:
            return ""  # interlanguage link
    if sep:
        label = label.strip()
        if label:
            # file-style options never reach here (files are dropped); a label with more pipes keeps
            # the last part
            return label.rsplit("|", 1)[-1] if prefix in _DROP_NS else label
        # pipe trick: [[Paris, Texas|]] -> Paris; [[Help:Foo (bar)|]] -> Foo
        t = t.split(":", 1)[1] if prefix else t
        return re.sub(r"\s*\(.*\)\s*$", "", t).split(",")[0].strip()
    if "#" in t:
        page, _, section = t.partition("#")
        return page.strip() or section.strip()
    return t


def _strip_links(text: str) -> str:
    text = _EXT_LINK.sub(lambda m: m.group(1) or "", text)
    for _ in range(20):
        new = _INNER_LINK.sub(_link, text)
        if new == text:
            break
        text = new
    return text.replace("[[", "").replace("]]", "")


def clean_wikitext(text: str) -> str:
    """Wikitext -> plain prose paragraphs, one per line (no blank lines).

    Removes HTML comments, references and other non-prose elements (math, code, galleries, ...),
    templates (nested; a few inline ones such as ``{{convert}}``, ``{{lang}}``, ``{{nowrap}}`` keep
    their text), tables (nested ``{| ... |}``), file/image/category and interlanguage links,
    external-link URLs, bold/italic quotes, magic words, headings, list markers, and whole
    "See also"/"References"/"External links"/... sections; ``[[a|b]]`` -> ``b``, ``[[a]]`` -> ``a``;
    HTML entities decoded.
    """
    if REDIRECT.match(text):
        return ""
    text = _COMMENT.sub("", text)
    text = _SELF_CLOSING.sub("", text)
    text = _PAIRED.sub("", text)
    text = re.sub(r"<\s*(?:ref|references)\b[^<>]*>", "", text, flags=re.I)  # unclosed leftovers
    text = _BR.sub(" ", text)
    text = _strip_templates(text)
    lines = _strip_tables(text.split("\n"))
    text = "\n".join(lines)
    text = _strip_links(text)
    text = _ANY_TAG.sub("", text)
    text = _BOLD_ITALIC.sub("", text)
    text = _MAGIC.sub("", text)
    text = _BARE_URL.sub("", text)
    text = html.unescape(text)
    text = text.replace("{{", "").replace("}}", "")

    out: list[str] = []
    skip_level = 0  # inside a skipped section of this heading level (0 = not skipping)
    for line in text.split("\n"):
        h = _HEADING.match(line)
        if h:
            level = len(h.group(1))
            if skip_level and level > skip_level:
                continue
            skip_level = level if h.group(2).strip().lower().rstrip(":") in _SKIP_SECTIONS else 0
            continue
        if skip_level:
            continue
        s = line.strip()
        if not s or s.startswith(("|", "!", "{|", "|}", "----")):
            continue
        s = _LIST.sub("", s)
        s = _SPACES.sub(" ", s)
        s = _EMPTY_PARENS.sub("", s)
        s = _PAREN_LEAD_PUNCT.sub("(", s)
        s = _SPACE_BEFORE_PUNCT.sub(r"\1", s)
        s = _DUP_PUNCT.sub(r"\1", s)
        s = _SPACES.sub(" ", s).strip()
        if not any(c.isalpha() for c in s):
            continue
        out.append(s)
    return "\n".join(out)
