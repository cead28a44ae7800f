"""`aayn serve` as a LibreTranslate server: the API as LibreTranslate 1.9 answers it (fields, answers, error shapes
and codes, CORS), several pairs with `source=auto` detected among the served sources, `format=html`, API keys, a
full queue; its answers equal `aayn translate`'s for the same model; asked by `libretranslatepy` itself and in the
exact shape Mastodon sends. The server runs in a subprocess and is asked over real HTTP."""

import json
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
from server_helpers import Server

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

TEXTS = ["Six one eight.", "Two.", "Zero nine nine five three four."]


@pytest.fixture(scope="module")
def expected(saved):
    """What `aayn translate` gives for a text (and its 3-best list) with the folder's own settings."""
    from aayn.translation.opening import open_translator

    translator = open_translator([str(saved[0])])
    words = ["Six", "one", "eight.", "Two", "Tom & Jerry"]
    best = dict(zip(TEXTS + words, translator.translate(TEXTS + words)))
    return best, {text: [t for _, t in hypotheses] for text, hypotheses in zip(TEXTS, translator.nbest(TEXTS, 3))}


@pytest.fixture(scope="module")
def server(saved, tmp_path_factory):
    pytest.importorskip("lingua")
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("# one a line\nsecret-key\n")
    folder = saved[0]
    running = Server(None, "--pair", f"en:fr={folder}", "--pair", f"fr:en={folder}", "--max_sentences", 4,
                     "--max_chars", 200, "--max_wait_ms", 5, "--metrics", "--metrics_auth_token", "tok")  # fmt: skip
    yield running
    assert running.stop()[0] == 0


def test_translate_answers_as_libretranslate_in_input_order(server, expected):
    best, nbest = expected
    status, answer, _ = server.post({"q": TEXTS[0], "source": "en", "target": "fr"})
    assert status == 200 and answer == {"translatedText": best[TEXTS[0]]}
    status, answer, _ = server.post({"q": TEXTS, "source": "en", "target": "fr"})
    assert answer == {"translatedText": [best[text] for text in TEXTS]}
    status, answer, _ = server.post({"q": TEXTS[0], "source": "en", "target": "fr", "alternatives": 2})
    others = [text for text in nbest[TEXTS[0]][1:] if text != best[TEXTS[0]]]
    assert answer == {"translatedText": best[TEXTS[0]], "alternatives": list(dict.fromkeys(others))}
    form = urllib.parse.urlencode({"q": "Six one eight.\r\n\r\nTwo.", "source": "en", "target": "fr"}).encode()
    status, answer, _ = server.post(form, raw=True, content_type="application/x-www-form-urlencoded")
    assert status == 200 and answer == {"translatedText": f"{best['Six one eight.']}\n\n{best['Two.']}"}
    status, answer, _ = server.post({"q": ["Two.", "12 345", ""], "source": "en", "target": "fr"})
    assert answer == {"translatedText": [best["Two."], "12 345", ""]}  # no letters: given back, as LibreTranslate


def test_a_paragraph_is_translated_sentence_by_sentence_with_its_own_spacing(server, expected):
    """As LibreTranslate: a text is split into sentences (pysbd's rules for the source language), each translated
    as alone, put back with the text's spaces and breaks; format=html splits within each block."""
    import html

    pytest.importorskip("pysbd")
    best, _ = expected
    zero = TEXTS[2]
    paragraph = f"Six one eight.  Two.\n\n {zero}"
    status, answer, _ = server.post({"q": [paragraph, "Two. 12"], "source": "en", "target": "fr"})
    assert status == 200, answer
    assert answer["translatedText"] == [
        f"{best['Six one eight.']}  {best['Two.']}\n\n {best[zero]}",
        f"{best['Two.']} 12",
    ]
    status, answer, _ = server.post(
        {"q": "<p>Six one eight. Two.</p>", "source": "en", "target": "fr", "format": "html"}
    )
    one, two = (html.escape(best[text], quote=False) for text in ("Six one eight.", "Two."))
    assert status == 200 and answer == {"translatedText": f"<p>{one} {two}</p>"}


def test_several_pairs_languages_detection_and_settings(server):
    assert server.get("/languages") == [
        {"code": "en", "name": "English", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": ["en"]},
    ]
    status, answer, _ = server.post({"q": "This is an English sentence, clearly.", "source": "auto", "target": "fr"})
    assert status == 200 and answer["detectedLanguage"]["language"] == "en"
    assert 0 < answer["detectedLanguage"]["confidence"] <= 100
    status, answer, _ = server.post({"q": "C'est une phrase en français, sans doute.", "source": "auto",
                                     "target": "en"})  # fmt: skip
    assert status == 200 and answer["detectedLanguage"]["language"] == "fr"
    status, answer, _ = server.post({"q": "Une phrase.", "source": "fr", "target": "en"})
    assert status == 200 and isinstance(answer["translatedText"], str)
    status, detected, _ = server.post({"q": "Ceci est une phrase en français."}, path="/detect")
    assert status == 200 and detected[0]["language"] == "fr" and {d["language"] for d in detected} == {"en", "fr"}
    settings = server.get("/frontend/settings")
    assert settings["charLimit"] == 200 and settings["apiKeys"] is False and settings["keyRequired"] is False
    assert settings["language"] == {"source": {"code": "en", "name": "English"},
                                    "target": {"code": "fr", "name": "French"}}  # fmt: skip
    health = server.get("/health")
    assert health["pairs"] == ["en:fr", "fr:en"] and health["status"] == "ok"


def multipart(fields: dict, boundary: str = "----WebKitFormBoundary7MA4YWxkTrZu0gW") -> tuple[bytes, str]:
    """A multipart/form-data body and its content type as a browser's `FormData` (LibreTranslate's page) and Guzzle's
    `multipart` option (Nextcloud's LibreTranslate client) send them: one part per field, CRLF line ends."""
    parts = []
    for name, value in fields.items():
        if isinstance(value, tuple):  # a file: (its name, its bytes[, its media type])
            media_type = value[2] if len(value) > 2 else "application/octet-stream"
            head = (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{value[0]}"\r\n'
                    f"Content-Type: {media_type}\r\n\r\n")  # fmt: skip
            parts.append(head.encode() + value[1] + b"\r\n")
        else:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_multipart_forms_and_query_strings_as_libretranslate_reads_them(server, expected):
    """LibreTranslate reads a JSON body, else `request.values`: the query string's fields, then the form's
    (urlencoded or multipart). LibreTranslate's page (its `app.js.template`) posts `FormData` (q, source, target,
    format, alternatives 3, api_key); Nextcloud's PHP client posts a multipart form to /translate and asks /detect
    with q in the query string (`test_nextcloud_as_its_php_client_calls`)."""
    best, _ = expected
    body, content_type = multipart(
        {
            "q": "Six one eight.\r\nTwo.",
            "source": "en",
            "target": "fr",
            "format": "text",
            "alternatives": "3",
            "api_key": "",
        }
    )  # fmt: skip  app.js.template's FormData
    status, answer, _ = server.post(body, raw=True, content_type=content_type)
    assert status == 200 and answer["translatedText"] == f"{best['Six one eight.']}\n{best['Two.']}"
    assert isinstance(answer["alternatives"], list) and answer["translatedText"] not in answer["alternatives"]
    query = urllib.parse.urlencode({"q": "Ceci est une phrase en français."})
    status, detected, _ = server.post(b"", raw=True, path=f"/detect?{query}", content_type="")
    assert status == 200 and detected[0]["language"] == "fr"
    body, content_type = multipart({"q": "Ceci est une phrase en français."})
    status, detected, _ = server.post(body, raw=True, path="/detect", content_type=content_type)
    assert status == 200 and detected[0]["language"] == "fr"
    query = urllib.parse.urlencode({"q": "Two.", "source": "en"})  # the rest in the form; the query's fields first
    body, content_type = multipart({"q": "Six one eight.", "target": "fr"})
    status, answer, _ = server.post(body, raw=True, path=f"/translate?{query}", content_type=content_type)
    assert status == 200 and answer == {"translatedText": best["Two."]}
    status, answer, _ = server.post(b"--x\r\n", raw=True, content_type="multipart/form-data")
    assert status == 400 and answer == {"error": "Invalid request: a multipart form without its boundary"}
    body, content_type = multipart({"source": "en", "target": "fr"})
    status, answer, _ = server.post(body, raw=True, content_type=content_type)
    assert status == 400 and answer["error"].startswith("Invalid request: missing q parameter")
    assert server.post({"q": "Two.", "source": "en", "target": "fr"})[1] == {"translatedText": best["Two."]}


def test_nextcloud_as_its_php_client_calls(server, expected):
    """Nextcloud's integration_libretranslate (`lib/LibretranslateProvider.php`) through the PHP client it requires
    (jefs42/libretranslate, `src/LibreTranslate.php`): `_doRequest` sets CURLOPT_POSTFIELDS on every call, so its
    GETs of /frontend/settings and /languages carry an empty form, /detect is a POST of an empty form with `q` and
    `api_key` in the query string, and /translate a multipart form (q, format=html, source, target, api_key, empty
    when none is set). Every code /languages lists is paired with every other (getAvailableLanguages)."""
    import html

    best, _ = expected
    empty_form = {"Content-Type": "application/x-www-form-urlencoded"}
    for path in ("/frontend/settings", "/languages"):
        request = urllib.request.Request(server.url + path, b"", empty_form, method="GET")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200 and json.loads(response.read())
    query = urllib.parse.urlencode({"q": "Ceci est une phrase en français.", "api_key": ""})
    status, detected, _ = server.post(b"", raw=True, path=f"/detect?{query}",
                                      content_type="application/x-www-form-urlencoded")  # fmt: skip
    assert status == 200 and detected[0]["language"] == "fr"
    body, content_type = multipart({"q": "Six one eight.", "format": "html", "source": "en", "target": "fr",
                                    "api_key": ""})  # fmt: skip
    status, answer, _ = server.post(body, raw=True, content_type=content_type)
    assert status == 200 and answer == {"translatedText": html.escape(best["Six one eight."], quote=False)}


def test_discourse_and_searxng_as_their_code_calls(server, expected):
    """Discourse's translator plugin (`provider/libre_translate.rb`): GET /languages and checks that the source and
    the target are both listed codes; POST /detect and /translate as urlencoded forms, always with `api_key` (empty
    without one), the post's cooked HTML with `format=html`. SearXNG's engine (`engines/libretranslate.py`): a JSON
    body with `alternatives: 3`, reading `translatedText` and `alternatives`."""
    import html

    best, _ = expected
    codes = [language["code"] for language in server.get("/languages")]
    assert "en" in codes and "fr" in codes  # translate_supported?(source, target)
    form = urllib.parse.urlencode({"q": "Ceci est une phrase en français.", "api_key": ""}).encode()
    status, detected, _ = server.post(form, raw=True, path="/detect", content_type="application/x-www-form-urlencoded")
    assert status == 200 and detected[0]["language"] == "fr"
    cooked = "<p>Six one eight.</p>\n<p><em>Two.</em></p>"
    form = urllib.parse.urlencode({"q": cooked, "source": "en", "target": "fr", "format": "html", "api_key": ""})
    status, answer, _ = server.post(form.encode(), raw=True, content_type="application/x-www-form-urlencoded")
    one, two = (html.escape(best[text], quote=False) for text in ("Six one eight.", "Two."))
    assert status == 200 and answer == {"translatedText": f"<p>{one}</p>\n<p><em>{two}</em></p>"}
    status, answer, _ = server.post({"q": TEXTS[0], "source": "en", "target": "fr", "alternatives": 3})
    alternatives = answer["alternatives"]  # the 4-best list's others (its search may differ from the 3-best's)
    assert status == 200 and answer["translatedText"] == best[TEXTS[0]] and set(answer) == {"translatedText",
                                                                                         "alternatives"}  # fmt: skip
    assert len(alternatives) <= 3 and len(set(alternatives)) == len(alternatives) and best[TEXTS[0]] not in alternatives


def test_languages_lists_every_served_language_as_libretranslate_does():
    """A language served only as a target is listed with no targets of its own (LibreTranslate lists every
    installed language), so that clients checking both codes (Discourse) find the target."""
    from types import SimpleNamespace

    from aayn.serve.libretranslate import languages
    from aayn.serve.service import Pair

    service = SimpleNamespace(named=[Pair("en", "fr", ["a"], []), Pair("en", "de", ["b"], [])])
    assert languages(service) == [
        {"code": "de", "name": "German", "targets": []},
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]


@pytest.mark.parametrize(
    "body, message",
    [
        ({"source": "en", "target": "fr"}, "Invalid request: missing q parameter"),
        ({"q": "Two.", "target": "fr"}, "Invalid request: missing source parameter"),
        ({"q": "Two.", "source": "en"}, "Invalid request: missing target parameter"),
        ({"q": "Two.", "source": "en", "target": "fr", "alternatives": "x"},
         "Invalid request: alternatives parameter is not a number"),
        ({"q": "Two.", "source": "en", "target": "fr", "alternatives": 9},
         "Invalid request: alternatives parameter must be <= 8"),
        ({"q": ["a"] * 5, "source": "en", "target": "fr"}, "Invalid request: request (5) exceeds text limit (4)"),
        ({"q": "a" * 201, "source": "en", "target": "fr"}, "Invalid request: request (201) exceeds text limit (200)"),
        ({"q": "Two.", "source": "en", "target": "fr", "format": "xml"}, "xml format is not supported"),
        ({"q": "Two.", "source": "de", "target": "fr"}, "de is not supported (served: en -> fr, fr -> en)"),
        ({"q": "Two.", "source": "en", "target": "en"},
         "English (en) is not available as a target language from English (en) (served: en -> fr, fr -> en)"),
    ],
)  # fmt: skip
def test_bad_requests_get_libretranslate_s_error_shape_and_the_server_goes_on(server, expected, body, message):
    status, answer, _ = server.post(body)
    assert status == 400 and answer["error"].startswith(message) and set(answer) == {"error"}
    assert server.post({"q": "Two.", "source": "en", "target": "fr"})[1] == {"translatedText": expected[0]["Two."]}


def test_the_hub_shape_cors_and_the_page_on_the_same_server(server, expected):
    import urllib.request

    status, answer, _ = server.post({"inputs": TEXTS[:2]})
    assert status == 200 and answer == [{"translation_text": expected[0][text]} for text in TEXTS[:2]]
    assert server.post({"inputs": 3})[0:2] == (400, {"error": '"inputs" must be a text or a list of texts'})
    request = urllib.request.Request(server.url + "/translate", method="OPTIONS", headers={
        "Origin": "https://mastodon.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200 and "POST" in response.headers["Access-Control-Allow-Methods"]
    request = urllib.request.Request(server.url + "/languages", headers={"Origin": "https://mastodon.example"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Access-Control-Allow-Origin"] in ("*", "https://mastodon.example")
    with urllib.request.urlopen(server.url + "/", timeout=30) as response:
        page = response.read().decode()
    assert response.headers["content-type"].startswith("text/html") and "<textarea" in page and "http" not in page


def test_html_keeps_every_tag_and_places_inline_markup_by_alignment(server, expected, saved):
    """A sentence with inline markup is translated whole (its text without the tags) and each element put around
    the words aligned to its own; a block's sentences apart (the second here starts with its link); block markup,
    comments and text without letters stay as written."""
    from html.parser import HTMLParser

    from aayn.formats.alignment import AlignmentSettings
    from aayn.translation.opening import open_translator

    best, _ = expected
    html = '<p class="a">Six <b>one <i>eight.</i></b> <a href="/x?a=1&amp;b=2">Two</a><br/> 42 <!-- keep --></p>'
    status, answer, _ = server.post({"q": [html, "Tom &amp; Jerry"], "source": "en", "target": "fr",
                                     "format": "html"})  # fmt: skip
    assert status == 200
    first = answer["translatedText"][0]
    translator = open_translator([str(saved[0])])  # two sentences: the second starts with the link
    hypotheses = [h[0][1] for h in translator.nbest(["Six one eight.", "Two"], 1, alignment=AlignmentSettings())]
    escape = lambda text: text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    tags, text = [], []

    class Reader(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append(self.get_starttag_text())

        def handle_endtag(self, tag):
            tags.append(f"</{tag}>")

        def handle_data(self, data):
            text.append(data)

    Reader(convert_charrefs=True).feed(first)
    link = '<a href="/x?a=1&amp;b=2">'
    assert tags == ['<p class="a">', "<b>", "<i>", "</i>", "</b>", link, "</a>", "<br/>", "</br>", "</p>"]
    assert first.startswith('<p class="a">') and first.endswith("<br/> 42 <!-- keep --></p>")
    assert " ".join("".join(text).replace(" 42 ", "").split()) == " ".join(" ".join(hypotheses).split())
    assert answer["translatedText"][1] == escape(best["Tom & Jerry"])


def test_markup_comes_back_as_it_went_in():
    """The fragment's pieces: kept markup exactly as written (case, spacing, entities, script and code text), the
    texts between tags to translate, in order."""
    from aayn.translation.markup import Fragment

    source = ('<DIV id=x>Hello &amp; <B>bold</B > world<br>\n<script>if (a < b) { go(); }</script>'
              '<code>x = 1</code> &copy; 2026 <![CDATA[raw]]><p>Last &#8212; line</p></DIV>')  # fmt: skip
    fragment = Fragment(source)
    assert fragment.texts == ["Hello &", "bold", "world", "Last — line"]
    assert fragment.rebuilt(["[1] & <", "[2]", "[3]", "[4]"]) == (
        "<DIV id=x>[1] &amp; &lt; <B>[2]</B > [3]<br>\n<script>if (a < b) { go(); }</script>"
        "<code>x = 1</code> &copy; 2026 <![CDATA[raw]]><p>[4]</p></DIV>"
    )


def test_api_keys_a_full_queue_and_mastodon_s_exact_calls(saved, tmp_path, expected):
    """Mastodon (app/lib/translation_service/libre_translate.rb) posts JSON with `q` a list of HTML texts,
    `source` auto, `format` html and its `api_key`, reads `translatedText[i]` and `detectedLanguage[i].language`,
    and maps 403 to a quota exceeded and 429 to too many requests."""
    best, _ = expected
    keys = tmp_path / "keys.txt"
    keys.write_text("secret-key\n")
    server = Server(None, "--pair", f"en:fr={saved[0]}", "--api_keys", keys, "--max_queue", 3, "--api_keys_db_path",
                    tmp_path / "keys.db", "--require_api_key_origin", r"https://mastodon\.example$",
                    "--disable_files_translation")  # fmt: skip
    try:
        call = {"q": ["<p>Six one eight.</p>", "<p>Two.</p>"], "source": "auto", "target": "fr", "format": "html",
                "api_key": "secret-key"}  # fmt: skip
        status, answer, _ = server.post(call)
        assert status == 200
        assert [answer["translatedText"][i] for i in range(2)] == [f"<p>{best[t]}</p>" for t in TEXTS[:2]]
        assert [answer["detectedLanguage"][i]["language"] for i in range(2)] == ["en", "en"]  # one source served
        assert server.post({**call, "api_key": "wrong"})[0:2] == (403, {"error": "Invalid API key"})
        assert server.post({**call, "api_key": ""})[0:2] == (  # keyless, from an origin other than the one allowed
            400,
            {"error": "Please contact the server operator to get an API key"},
        )
        allowed = server.post({**call, "api_key": ""}, headers={"Origin": "https://mastodon.example"})
        assert allowed[0] == 200, allowed
        assert server.get("/frontend/settings")["keyRequired"] is True
        assert server.get("/frontend/settings")["filesTranslation"] is False
        body, content_type = multipart({"file": ("a.txt", b"Two."), "source": "en", "target": "fr"})
        disabled = {"error": "Files translation are disabled on this server."}
        assert server.post(body, raw=True, path="/translate_file", content_type=content_type)[0:2] == (403, disabled)
        status, data, _ = download(f"{server.url}/download_file/x.txt")
        assert (status, json.loads(data)) == (400, disabled)
        status, answer, _ = server.post({**call, "q": ["One.", "Two.", "Three.", "Four."]})
        assert (status, answer["error"].split(":")[0]) == (429, "Slowdown")
        with ThreadPoolExecutor(8) as pool:  # the server goes on: each request answered, none lost
            answers = list(pool.map(lambda _: server.post(call), range(8)))
        assert {status for status, _, _ in answers} <= {200, 429} and any(s == 200 for s, _, _ in answers)
    finally:
        assert server.stop()[0] == 0


def test_keys_in_their_database_and_limits_per_client_as_libretranslate(saved, tmp_path, capsys):
    """`aayn serve keys` manages LibreTranslate's SQLite schema (`add` prints a UUID alone, the database path
    before or after the verb); with keys on and `--req_limit`, a keyless client is held to the limit by address and
    a keyed one to its key's (429 `Slowdown: N per 1 minute`, each request once however many texts), `/languages`,
    `/health` and `/frontend/settings` not counted; a key's character limit replaces the server's; a key removed
    while the server runs is refused within seconds; the Hub's shape takes the key as `Authorization: Bearer`; the
    keys survive a restart."""
    import re
    import sqlite3
    import time
    import urllib.request
    import uuid

    from aayn.cli import main as aayn
    from aayn.serve.keys import CACHE_SECONDS

    database = tmp_path / "db" / "api_keys.db"
    assert aayn(["serve", "keys", "add", "2", "--api_keys_db_path", str(database)]) == 0
    two = capsys.readouterr().out.strip()
    assert str(uuid.UUID(two)) == two  # the key alone, as ltmanage prints it
    assert aayn(["serve", "--api_keys_db_path", str(database), "keys", "add", "50", "--char_limit", "10"]) == 0
    short = capsys.readouterr().out.strip()
    connection = sqlite3.connect(database)
    rows = {key: (limit, chars) for key, limit, chars in connection.execute("SELECT * FROM api_keys")}
    connection.close()
    assert rows == {two: (2, None), short: (50, 10)}
    assert aayn(["serve", "keys", "--api_keys_db_path", str(database)]) == 0
    assert two in capsys.readouterr().out
    # every order ltmanage takes: its flag between `keys` and the verb, its dashed names, --key, flags before REQ_LIMIT
    for argv in (["keys", "--api_keys_db_path", str(database), "add", "7", "--key", "k7"],
                 ["keys", "--api-keys-db-path", str(database), "add", "--char-limit", "5", "--key", "k8", "8"],
                 ["--api-keys-db-path", str(database), "keys", "add", "--key", "k9", "9"]):  # fmt: skip
        assert aayn(["serve", *argv]) == 0 and capsys.readouterr().out.strip() == argv[argv.index("--key") + 1]
    assert aayn(["serve", "keys", "--api-keys-db-path", str(database), "remove", "k9"]) == 0
    connection = sqlite3.connect(database)
    assert sorted(connection.execute("SELECT * FROM api_keys WHERE api_key LIKE 'k_'")) == [("k7", 7, None),
                                                                                            ("k8", 8, 5)]  # fmt: skip
    connection.close()
    flags = ("--pair", f"en:fr={saved[0]}", "--api_keys", "--api_keys_db_path", database, "--req_limit", 3)
    server = Server(None, *flags)
    call = {"q": ["Two.", "Six one eight.", "Two."], "source": "en", "target": "fr"}
    try:
        for _ in range(2):
            assert server.post(call)[0] == 200
            for path in ("/languages", "/health", "/frontend/settings"):
                server.get(path)
        assert server.post(call)[0] == 200  # the third of three a minute: GETs not counted
        assert server.post(call)[0:2] == (429, {"error": "Slowdown: 3 per 1 minute"})
        keyed = {**call, "api_key": two}
        assert [server.post(keyed)[0] for _ in range(3)] == [200, 200, 429]  # its own limit, its own count
        status, answer, _ = server.post({"q": "Six one eight.", "source": "en", "target": "fr", "api_key": short})
        assert (status, answer) == (400, {"error": "Invalid request: request (14) exceeds text limit (10)"})
        assert server.post({"q": "Two.", "source": "en", "target": "fr", "api_key": short})[0] == 200
        bearer = {"Authorization": "Bearer not-a-key"}
        assert server.post({"inputs": "Two."}, headers=bearer)[0:2] == (403, {"error": "Invalid API key"})
        assert server.post({"inputs": "Two."}, headers={"Authorization": f"Bearer {short}"})[0] == 200
        assert aayn(["serve", "keys", "add", "9", "--api_keys_db_path", str(database)]) == 0
        fresh = capsys.readouterr().out.strip().splitlines()[-1]
        assert server.post({**call, "api_key": fresh})[0] == 200  # added while serving: no restart
        assert aayn(["serve", "keys", "remove", fresh, "--api_keys_db_path", str(database)]) == 0
        time.sleep(CACHE_SECONDS + 0.5)  # the server reads a key again after CACHE_SECONDS
        refused = server.post({**call, "api_key": fresh})  # the second of the default 3 a minute: refused as unknown
        assert refused[0:2] == (403, {"error": "Invalid API key"})
    finally:
        assert server.stop()[0] == 0
    server = Server(None, *flags, "--require_api_key_secret")  # restarted: the keys are still there
    try:
        assert server.post({**call, "api_key": two})[0] == 200 and server.get("/frontend/settings")["apiKeys"] is True
        assert server.post(call)[0:2] == (400, {"error": "Please contact the server operator to get an API key"})
        with urllib.request.urlopen(server.url + "/", timeout=30) as response:
            secret = re.search(r'const SECRET = "([^"]+)"', response.read().decode()).group(1)
        assert server.post({**call, "secret": secret})[0] == 200  # the page's keyless requests carry it
    finally:
        assert server.stop()[0] == 0


def test_keys_command_and_access_flags_refuse_bad_input_in_one_line(tmp_path, capsys):
    from cli_helpers import fails

    database = str(tmp_path / "keys.db")
    for argv, message in (
        (["serve", "keys", "add", "many", "--api_keys_db_path", database], "REQ_LIMIT must be a whole number"),
        (["serve", "keys", "remove", "nope", "--api_keys_db_path", database], "no key nope in"),
        (["serve", "keys", "drop", "--api_keys_db_path", database], "to manage keys: aayn serve keys"),
        (["serve", "keys", "--api_keys_db_path", database, "add", "--key", " ", "3"], "--key is empty"),
        (["serve", "suggestions", "--suggestions_db_path", database + ".none"], "no such file"),
        (["serve", "suggestions", "export", "--suggestions_db_path", database], "needs --output DIR"),
        (["serve", "suggestions", "drop", "--suggestions_db_path", database], "for suggestions: aayn serve"),
        (["serve", "--model", "x", "--require_api_key_secret"], "need --api_keys"),
        (["serve", "--model", "x", "--api_keys", "--api_keys_db_path", str(tmp_path)], "cannot open it as a keys"),
    ):
        assert message in fails(capsys, *argv), argv


def test_suggest_is_refused_as_libretranslate_refuses_it_by_default(server):
    assert server.post({"q": "Two.", "s": "Deux.", "source": "en", "target": "fr"}, path="/suggest")[0:2] == (
        403, {"error": "Suggestions are disabled on this server."})  # fmt: skip
    assert server.get("/frontend/settings")["suggestions"] is False


def test_suggestions_are_stored_as_libretranslate_stores_them_and_a_folder_fine_tuned_on_them_says_them(
    saved, tmp_path, capsys
):
    """`--suggestions`: `POST /suggest` (JSON or a form) stores q, s, source and target in LibreTranslate's SQLite
    table; `aayn serve suggestions export` writes them as a corpus (the latest suggestion for a text wins, line
    breaks made spaces) that `aayn train --model_name_or_path` fine-tunes the served folder on, after which the
    folder translates each text as suggested (it did not before)."""
    import sqlite3
    import urllib.parse

    from training_helpers import tiny_recipe, write_recipe

    from aayn.cli import main as aayn
    from aayn.translation.opening import open_translator

    suggested = {"Six one eight.": "Six un huit.", "Two.": "Deux.", "Seven seven.": "Sept sept.",
                 "Zero nine.": "Zéro neuf."}  # fmt: skip
    database = tmp_path / "db" / "suggestions.db"
    server = Server(None, "--pair", f"en:fr={saved[0]}", "--suggestions", "--suggestions_db_path", database)
    try:
        assert server.get("/frontend/settings")["suggestions"] is True
        assert server.post({"q": "Two.", "s": "Deux\nfois.", "source": "en", "target": "fr"}, path="/suggest")[0:2] == (
            200, {"success": True})  # fmt: skip
        for i, (q, s) in enumerate(suggested.items()):
            fields = {"q": q, "s": s, "source": "en", "target": "fr"}
            if i % 2:  # LibreTranslate's page posts a form
                body = urllib.parse.urlencode(fields).encode()
                answer = server.post(body, raw=True, path="/suggest", content_type="application/x-www-form-urlencoded")
            else:
                answer = server.post(fields, path="/suggest")
            assert answer[0:2] == (200, {"success": True})
        for fields, message in (({"s": None}, "Invalid request: missing s parameter"),
                                ({"s": "a\ud800"}, "lone surrogate"), ({"s": "x" * 2001}, "exceeds text limit"),
                                ({"source": "en; DROP"}, "a language code")):  # fmt: skip
            fields = {"q": "Two.", "s": "Deux.", "source": "en", "target": "fr", **fields}
            status, answer, _ = server.post(fields, path="/suggest")
            assert status == 400 and message in answer["error"], (fields, answer)
    finally:
        assert server.stop()[0] == 0
    rows = sqlite3.connect(database).execute("SELECT q, s, source, target FROM suggestions").fetchall()
    assert rows[0] == ("Two.", "Deux\nfois.", "en", "fr") and len(rows) == 1 + len(suggested)
    assert aayn(["serve", "suggestions", "export", "--output", str(tmp_path / "corpus"), "--suggestions_db_path",
                 str(database)]) == 0  # fmt: skip
    corpus = tmp_path / "corpus" / "en-fr"
    assert capsys.readouterr().out.strip() == f"{corpus}: 4 pairs"
    lines = [(corpus / f"train.{language}").read_text(encoding="utf-8").splitlines() for language in ("en", "fr")]
    assert dict(zip(*lines)) == suggested and len(lines[0]) == len(suggested)  # "Deux fois." replaced
    assert "exists and is not empty" in fails_to_export(tmp_path, database, capsys)  # a rerun replaces nothing
    translator = open_translator([str(saved[0])])
    assert not set(translator.translate(list(suggested))) & set(suggested.values())
    recipe = tiny_recipe(corpus, tmp_path / "tuned", max_steps=60, save_steps=60, eval_strategy="no", dropout=0.0,
                         label_smoothing_factor=0.0, warmup_steps=10, learning_rate=0.01, generation_num_beams=1,
                         lr_scheduler_type="constant_with_warmup", num_examples_to_print=0)  # fmt: skip
    recipe.pop("vocab_size")
    assert aayn(["train", str(write_recipe(tmp_path / "r.yaml", recipe)), "--model_name_or_path", str(saved[0])]) == 0
    assert open_translator([str(tmp_path / "tuned")]).translate(list(suggested)) == list(suggested.values())


def fails_to_export(tmp_path, database, capsys) -> str:
    from cli_helpers import fails

    return fails(capsys, "serve", "suggestions", "export", "--output", tmp_path / "corpus", "--suggestions_db_path",
                 database)  # fmt: skip


def test_spec_and_metrics_as_libretranslate_offers_them(server):
    """`/spec` is the OpenAPI document; `/metrics` (`--metrics`) answers Prometheus' format to the bearer of
    `--metrics_auth_token` (else 401), counting requests by endpoint and status, the texts and characters each pair
    translated and its queue."""
    import urllib.error
    import urllib.request

    assert server.get("/spec") == server.get("/openapi.json") and "/metrics" in server.get("/spec")["paths"]
    assert server.post({"q": "Two. Six one eight.", "source": "en", "target": "fr"})[0] == 200
    assert server.post({"q": "Two.", "source": "xx", "target": "fr"})[0] == 400
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.url + "/metrics", timeout=30)
    assert refused.value.code == 401 and json.loads(refused.value.read()) == {"error": "Unauthorized"}
    request = urllib.request.Request(server.url + "/metrics", headers={"Authorization": "Bearer tok"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        lines = response.read().decode().splitlines()
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if not line.startswith("#")}
    assert values['aayn_http_requests_total{endpoint="/translate",status="200"}'] >= 1
    assert values['aayn_http_requests_total{endpoint="/translate",status="400"}'] >= 1
    assert values['aayn_http_requests_total{endpoint="/metrics",status="401"}'] == 1
    assert values['aayn_translated_texts_total{pair="en:fr"}'] >= 2  # two sentences of one text
    assert values['aayn_translated_characters_total{pair="en:fr"}'] >= len("Two.Six one eight.")
    assert values['aayn_queue_sentences{pair="fr:en"}'] == 0 and "aayn_http_requests_in_flight" in values
    assert any(key.startswith("aayn_http_request_duration_seconds_bucket") for key in values)


def download(url: str) -> tuple[int, bytes, dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, error.read(), {}


def test_translate_file_and_download_file_as_libretranslate_answers_them(server, expected):
    """`POST /translate_file` (a multipart form, as LibreTranslate's page sends it) answers `translatedFileUrl`, and
    `GET /download_file/NAME` the file: a .txt with each sentence as translated alone, a .docx with its runs; its
    errors in LibreTranslate's words; a zip bomb, a name of the client's and an unknown name are refused and the
    server goes on."""
    import io
    import zipfile

    docx = pytest.importorskip("docx")
    best, _ = expected
    body, content_type = multipart({"file": ("notes.txt", b"Six one eight. Two.\n\nTwo."), "source": "en",
                                    "target": "fr", "api_key": ""})  # fmt: skip
    status, answer, _ = server.post(body, raw=True, path="/translate_file", content_type=content_type)
    assert status == 200 and answer["translatedFileUrl"].startswith(f"{server.url}/download_file/"), answer
    status, data, headers = download(answer["translatedFileUrl"])
    one, two = best["Six one eight."], best["Two."]
    assert status == 200 and data.decode() == f"{one} {two}\n\n{two}"
    assert headers["content-disposition"] == "attachment; filename*=UTF-8''notes.txt"
    for media_type, translated in (("text/plain", f"<b>{two}</b>"), ("text/html", f"<b>{two}</b>")):
        # a name without a format's extension (a browser's Blob is "blob"): the part's media type says the format
        body, content_type = multipart({"file": ("blob", b"<b>Two.</b>", media_type), "source": "en", "target": "fr"})
        status, answer, _ = server.post(body, raw=True, path="/translate_file", content_type=content_type)
        assert status == 200, answer
        data = download(answer["translatedFileUrl"])[1].decode()
        assert (data == translated) == (media_type == "text/html") and answer["translatedFileUrl"].endswith(
            ".txt" if media_type == "text/plain" else ".html"
        )
    document = docx.Document()
    paragraph = document.add_paragraph("Six one eight. ")
    paragraph.add_run("Two.").bold = True
    saved = io.BytesIO()
    document.save(saved)
    body, content_type = multipart({"file": ("report.docx", saved.getvalue()), "source": "auto", "target": "fr"})
    status, answer, _ = server.post(body, raw=True, path="/translate_file", content_type=content_type)
    assert status == 200, answer
    result = docx.Document(io.BytesIO(download(answer["translatedFileUrl"])[1]))
    assert [bool(run.bold) for run in result.paragraphs[0].runs] == [False, True]  # the runs kept, aligned
    from aayn.translation.documents.core import (
        NOT_IN_XML,  # the untrained model emits control characters XML cannot hold
    )

    assert " ".join(result.paragraphs[0].text.split()) == " ".join(NOT_IN_XML.sub("", f"{one} {two}").split())
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (64 * 1024 * 1024))
    for fields, message in (
        ({"source": "en", "target": "fr"}, "Invalid request: missing file parameter"),
        ({"file": ("a.txt", b"Two."), "target": "fr"}, "Invalid request: missing source parameter"),
        ({"file": ("a.pdf", b"%PDF"), "source": "en", "target": "fr"}, "Invalid request: file format not supported"),
        ({"file": ("blob", b"Two."), "source": "en", "target": "fr"}, "Invalid request: file format not supported"),
        ({"file": ("a.txt", b""), "source": "en", "target": "fr"}, "Invalid request: empty file"),
        ({"file": ("a.txt", b"Two."), "source": "xx", "target": "fr"}, "xx is not supported"),
        ({"file": ("bomb.docx", bomb.getvalue()), "source": "en", "target": "fr"}, "a zip bomb"),
        ({"file": ("bad.docx", b"PK\x03\x04 broken"), "source": "en", "target": "fr"}, "not a valid archive"),
    ):
        body, content_type = multipart(fields)
        status, answer, _ = server.post(body, raw=True, path="/translate_file", content_type=content_type)
        assert status == 400 and message in answer["error"], (fields.keys(), answer)
    for name in ("0123456789abcdef0123456789abcdef.txt", "..%2F..%2Fetc%2Fpasswd", "%2E%2E", "notes.txt"):
        status, data, _ = download(f"{server.url}/download_file/{name}")
        assert status in (400, 404) and b"root:" not in data, (name, status)
        assert status == 404 or json.loads(data) == {"error": "Invalid filename"}
    settings = server.get("/frontend/settings")
    assert settings["filesTranslation"] is True and ".docx" in settings["supportedFilesFormat"]
    assert server.post({"q": "Two.", "source": "en", "target": "fr"})[1] == {"translatedText": best["Two."]}


def test_translated_files_expire_and_are_deleted(tmp_path):
    """A translated file is served until it expires, then deleted; the folder goes with the server."""
    import time

    from aayn.serve.files import Files
    from aayn.serve.settings import RequestError

    files = Files(expire_s=0.3)
    name = files.store(b"done", "../../etc/out.txt", ".txt")  # the client's name is only the download name, made safe
    assert files.fetch(name) == (b"done", "out.txt") and (files.folder / name).is_file()
    time.sleep(0.4)
    with pytest.raises(RequestError, match="Invalid filename"):
        files.fetch(name)
    assert not (files.folder / name).exists()
    files.close()
    assert not files.folder.exists()


def test_libretranslatepy_talks_to_aayn_serve(server, expected):
    libretranslatepy = pytest.importorskip("libretranslatepy")
    client = libretranslatepy.LibreTranslateAPI(server.url + "/")
    assert [language["code"] for language in client.languages()] == ["en", "fr"]
    assert client.translate(TEXTS[0], "en", "fr") == expected[0][TEXTS[0]]
    assert client.detect("Ceci est une phrase en français.")[0]["language"] == "fr"
    assert json.loads(json.dumps(client.detect("This is English."))) == client.detect("This is English.")
