"""`aayn serve` under a request's options together, drawn by hypothesis (both request shapes: glossaries in every
form, good and bad terms among them, `format=html` with nesting up to past its limit, alignment, alternatives,
lists of texts, sizes, beams): no answer is a 5xx, each refusal is one line, and a good request sent at the same
moment (so batched beside it where their options agree) gets the answer it gets alone. The server runs in a
subprocess with two worker processes, asked over real HTTP; the examples are derandomized, so a run is the same
every time."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from server_helpers import Server

pytest.importorskip("hypothesis")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORDS = [
    "one",
    "two",
    "Three",
    "four",
    "five.",
    "</s>",
    "<pad>",
    "<unk>",
    "zz",
    "é",
    "&amp;",
    "&",
    "<",
    "\u2028",
    "x" * 40,
]
SOURCE_TERMS = ["one", "two", "Three", "four"]
TERMS = ["zzunn", "deux", "</s>", "<pad>", "Trois quatre", " ".join(["zz"] * 300), "", " "]
GOOD = {"q": ["one two", "Three."], "source": "en", "target": "fr"}

plain = st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join)
tag = st.sampled_from(["b", "i", "a", "p", "span", "code"])
nested = st.recursive(
    plain, lambda inner: st.tuples(tag, inner).map(lambda t: f"<{t[0]}>{t[1]}</{t[0]}>"), max_leaves=8
)
deep = st.integers(1, 250).map(lambda n: "<b>" * n + "one two" + "</b>" * n)
texts = st.one_of(plain, nested, deep)
term = st.sampled_from(TERMS)
glossary = st.one_of(
    st.dictionaries(st.sampled_from(SOURCE_TERMS), term, max_size=3),
    st.lists(st.lists(st.sampled_from(SOURCE_TERMS + TERMS), min_size=0, max_size=3), max_size=3),
    st.lists(st.tuples(st.sampled_from(SOURCE_TERMS), term).map("\t".join), max_size=3).map("\n".join),
    st.none(),
)
libretranslate = st.fixed_dictionaries(
    {"q": st.one_of(texts, st.lists(texts, min_size=1, max_size=4)), "source": st.just("en"), "target": st.just("fr")},
    optional={"format": st.sampled_from(["text", "html"]), "glossary": glossary, "alignment": st.booleans(),
              "alternatives": st.integers(0, 3)},
)  # fmt: skip
hub = st.fixed_dictionaries(
    {"inputs": st.one_of(texts, st.lists(texts, min_size=1, max_size=4))},
    optional={"parameters": st.fixed_dictionaries({}, optional={
        "glossary": glossary, "alignment": st.booleans(), "num_beams": st.integers(1, 6),
        "num_return_sequences": st.integers(1, 3), "max_new_tokens": st.integers(1, 40)})},
)  # fmt: skip


@pytest.fixture(scope="module")
def server(saved):
    running = Server(None, "--pair", f"en:fr={saved[0]}", "--workers", 2, "--max_wait_ms", 20, "--max_chars", 20000)
    alone = running.post(GOOD)
    assert alone[0] == 200, alone
    yield running, alone[1]
    code, said = running.stop()
    assert code == 0, said[-3000:]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(libretranslate, hub))
def test_no_request_gets_a_5xx_nor_harms_its_batch_mate(server, body):
    running, alone = server
    with ThreadPoolExecutor(2) as pool:
        (status, answer, _), (good_status, good, _) = pool.map(running.post, [body, GOOD])
    assert status < 500, (body, answer)
    if status != 200:
        assert len(answer["error"].splitlines()) == 1, answer
    assert good_status == 200 and good == alone, (body, good)
