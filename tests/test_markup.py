"""Inline markup placed by alignments (`aayn.translation.markup`, `aayn translate --html`, `aayn serve`'s format=html):
hand-worked placements, and well-formed output whatever the alignment says (random nested markup, random links)."""

import random
from html.parser import HTMLParser

import pytest

from aayn.formats.alignment import Alignment
from aayn.translation.markup import Fragment


def words_alignment(source: str, target: str, links: list[tuple[int, int]]) -> Alignment:
    """An alignment of whole words (one token a word, space-marked as a byte-level BPE marks them)."""
    marked = lambda text: [("Ġ" if i else "") + word for i, word in enumerate(text.split())]
    return Alignment([(i, j, 1.0) for i, j in links], marked(source), marked(target))


def placed(html: str, translation: str, links: list[tuple[int, int]]) -> str:
    fragment = Fragment(html, aligned=True)
    assert len(fragment.texts) == 1
    return fragment.rebuilt([translation], [words_alignment(fragment.texts[0], translation, links)])


@pytest.mark.parametrize(
    ("html", "translation", "links", "want"),
    [
        # the element around the words aligned to its own, nested elements within their parents
        ("The <b>big <i>red</i></b> house.", "La grande maison rouge.", [(0, 0), (1, 1), (2, 3), (3, 2)],
         "La <b>grande maison <i>rouge.</i></b>"),
        ('See <a href="/x?a=1&amp;b=2">the garden</a> now.', "Voyez le jardin maintenant.", [(1, 1), (2, 2)],
         'Voyez <a href="/x?a=1&amp;b=2">le jardin</a> maintenant.'),
        # a parent spans from the first to the last of its words' targets, its children within
        ("<b>one <i>two</i></b> three", "un deux trois", [(0, 0), (1, 2)], "<b>un deux <i>trois</i></b>"),
        # siblings aligned across each other: the later one starts after the earlier one's words
        ("<b>one</b> <i>two</i>", "deux un", [(0, 1), (1, 0)], "deux <b>un</b> <i></i>"),
        # an element none of whose words is aligned wraps the word at its relative place
        ("one two <b>three</b> four", "un deux trois quatre", [], "un deux <b>trois</b> quatre"),
        # escaping: the translation's text is escaped, the tags are as written
        ("a <B class='x'>b</B > c", "a < b & c", [(1, 1)], "a <B class='x'>&lt;</B > b &amp; c"),
    ],
)  # fmt: skip
def test_elements_go_around_the_aligned_target_words(html, translation, links, want):
    assert placed(html, translation, links) == want


class Structure(HTMLParser):
    """The start and end tags in order, and the text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(("start", tag, tuple(attrs)))

    def handle_endtag(self, tag):
        self.tags.append(("end", tag, ()))

    def handle_data(self, data):
        self.text.append(data)


def read(html: str) -> Structure:
    structure = Structure()
    structure.feed(html)
    structure.close()
    return structure


def balanced(tags) -> bool:
    stack = []
    for kind, tag, _ in tags:
        if kind == "start":
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return False
    return not stack


def random_markup(rng: random.Random, words: list[str], depth: int = 0) -> str:
    """Words with random nested inline elements (b, i, a href, span) around random runs of them."""
    out, i = [], 0
    while i < len(words):
        if depth < 3 and rng.random() < 0.35:
            run = rng.randint(1, min(3, len(words) - i))
            tag = rng.choice(["b", "i", "span", "a"])
            opening = f'<a href="/p{i}">' if tag == "a" else f"<{tag}>"
            out.append(opening + random_markup(rng, words[i : i + run], depth + 1) + f"</{tag}>")
            i += run
        else:
            out.append(words[i])
            i += 1
    return " ".join(out)


@pytest.mark.parametrize("seed", range(40))
def test_random_nested_markup_and_random_links_stay_well_formed(seed):
    """Whatever the links, the output holds every element of the input, once, in the same nesting (each end tag
    closes its own start tag), and its text is the translation's words in order."""
    rng = random.Random(seed)
    source_words = [f"w{i}" for i in range(rng.randint(2, 9))]
    html = "<p>" + random_markup(rng, source_words) + "</p>"
    translation = " ".join(f"t{j}" for j in range(rng.randint(1, 10)))
    links = [(rng.randrange(len(source_words)), j) for j in range(len(translation.split())) if rng.random() < 0.8]
    fragment = Fragment(html, aligned=True)
    out = fragment.rebuilt([translation], [words_alignment(fragment.texts[0], translation, links)])
    before, after = read(html), read(out)
    assert balanced(after.tags), out
    assert sorted(tag for tag in after.tags if tag[0] == "start") == sorted(t for t in before.tags if t[0] == "start")
    assert "".join(after.text).split() == translation.split()


def test_aayn_translate_html(saved, capsys):
    from cli_helpers import translate_fails

    from aayn.cli import main as aayn

    line = '<p>one <b>two <i>three</i></b> <a href="/x">four</a><br> 5 <!-- kept --></p>'
    assert aayn(["translate", "--model", str(saved[0]), "--html", line, "<h1>six</h1>"]) == 0
    first, second = capsys.readouterr().out.splitlines()
    structure = read(first)
    assert balanced([tag for tag in structure.tags if tag[1] != "br"])
    assert first.startswith("<p>") and first.endswith("<br> 5 <!-- kept --></p>") and second.startswith("<h1>")
    message = translate_fails(capsys, "--model", str(saved[0]), "--html", "--nbest", "2", line)
    assert "--html translates each line's HTML once" in message
