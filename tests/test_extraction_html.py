"""HTML extraction: corpus pages, boilerplate removal, charsets, empty and oversized pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldims.errors import PermanentError
from workers.extraction import detect_format, extract_file
from workers.extraction.html import extract_html
from workers.extraction.result import ExtractionLimits

DOCS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "docs"
LIMITS = ExtractionLimits()


def _write(tmp_path: Path, markup: str, encoding: str = "utf-8") -> Path:
    path = tmp_path / "page.html"
    path.write_bytes(markup.encode(encoding))
    return path


def test_wikipedia_page_keeps_article_and_drops_navigation() -> None:
    result = extract_html(DOCS / "docling__wiki_duck.html", LIMITS)
    assert result.format == "text/html" and result.extractor == "lxml-html"
    assert result.metadata["title"] == "Duck - Wikipedia"
    assert result.metadata["language"] == "en"
    assert result.metadata["encoding"] == "utf-8" and result.metadata["page_count"] == 1
    assert [page.number for page in result.pages] == [1]
    assert "Duck is the common name for numerous species of waterfowl" in result.text
    headings = [(section.heading, section.level) for section in result.sections]
    assert headings[0] == ("Duck", 1)
    assert ("Etymology", 2) in headings and ("Taxonomy", 2) in headings
    assert ("Feeding", 3) in headings and ("External links", 2) in headings
    etymology = next(s for s in result.sections if s.heading == "Etymology")
    assert "Old English" in etymology.text
    for chrome in ("Jump to content", "Main menu", "Personal tools", "Privacy policy"):
        assert chrome not in result.text
    assert "136 languages" not in result.text and "Toggle the table of contents" not in result.text
    assert "[edit]" not in result.text
    # The taxobox is a data table; its rows are in the text as well.
    assert any("Kingdom: | Animalia" in table.text for table in result.tables)
    assert "Kingdom: | Animalia" in result.text


def test_scripts_and_styles_are_not_text() -> None:
    result = extract_html(DOCS / "unstructured__example-with-scripts.html", LIMITS)
    assert result.text.startswith("Russian Offensive Campaign Assessment, December 13")
    assert result.sections[0].heading == "Russian Offensive Campaign Assessment, December 13"
    assert "Belarusian forces remain unlikely to attack Ukraine" in result.text
    for code in ("function(", "var ", "window.", "jQuery", "Drupal.settings"):
        assert code not in result.text
    assert result.text.count("{") + result.text.count("}") < 5
    # Site header (menu, search form) and footer are gone.
    assert "Skip to main content" not in result.text and "Planned Giving" not in result.text
    assert "1400 16th Street NW" not in result.text
    assert result.metadata["language"] == "en"
    assert result.metadata["description"].startswith("Belarusian forces remain unlikely")


def test_cp1252_page_without_declaration() -> None:
    result = extract_html(DOCS / "unstructured__fake-html-cp1252.html", LIMITS)
    assert result.metadata["encoding"] == "cp1252"
    assert [(s.heading, s.level) for s in result.sections] == [("My First Heading", 1)]
    assert result.metadata["title"] == "My First Heading"  # no <title>: the first h1
    for phrase in ("très", "niño", "15,50 €", "Die schöne Frau"):
        assert phrase in result.text
    # <pre> keeps its lines.
    assert "\nL'été était très chaud cette année." in result.text


def test_russian_resume_fragment() -> None:
    result = extract_html(DOCS / "tika__resume.html", LIMITS)
    assert result.text.startswith("Здравствуйте")
    assert "Предлагаем Вам ознакомиться" in result.text
    assert "font-family" not in result.text and "style_" not in result.text


def test_only_main_content_remains(tmp_path: Path) -> None:
    page = """<!doctype html><html lang="de-AT"><head><title> Preise  2024 </title>
    <meta name="author" content="Anna Huber"><meta name="description" content="Unsere Preise">
    <style>body { color: red }</style></head><body>
    <div class="cookie-banner">Wir verwenden Cookies. Akzeptieren?</div>
    <a class="skip-link" href="#c">Zum Inhalt springen</a>
    <header><a href="/">Logo GmbH</a><nav><ul><li>Start</li><li>Kontakt</li></ul></nav></header>
    <aside>Ähnliche Artikel: Sommerangebote</aside>
    <main id="c"><h1>Preisliste</h1>
      <p>Alle  Preise
         verstehen sich <b>inklusive</b> Mehrwertsteuer.</p>
      <div class="share-buttons">Auf Facebook teilen</div>
      <div hidden>Versteckter Text</div><span aria-hidden="true">Symbol</span>
      <h2>Kaffee</h2><table><tr><th>Sorte</th><th>Preis</th></tr>
      <tr><td>Espresso</td><td>2,10 €</td></tr></table>
      <p>Zeile eins<br>Zeile zwei <img src="x.png" alt="Bild einer Tasse"></p>
    </main>
    <footer>Impressum · Datenschutz</footer><script>var tracking = 1;</script>
    </body></html>"""
    result = extract_html(_write(tmp_path, page), LIMITS)
    assert result.text == (
        "Preisliste\nAlle Preise verstehen sich inklusive Mehrwertsteuer.\nKaffee\n"
        "Sorte | Preis\nEspresso | 2,10 €\nZeile eins\nZeile zwei"
    )
    assert [t.text for t in result.tables] == ["Sorte | Preis\nEspresso | 2,10 €"]
    assert [(s.heading, s.level, s.text) for s in result.sections] == [
        ("Preisliste", 1, "Alle Preise verstehen sich inklusive Mehrwertsteuer."),
        ("Kaffee", 2, "Sorte | Preis\nEspresso | 2,10 €\nZeile eins\nZeile zwei"),
    ]
    assert result.metadata == {
        "title": "Preise 2024",
        "language": "de",
        "author": "Anna Huber",
        "description": "Unsere Preise",
        "encoding": "utf-8",
        "page_count": 1,
    }


def test_page_without_main_drops_chrome_but_keeps_header_with_h1(tmp_path: Path) -> None:
    page = """<html><body><div id="navbar">Home | About</div>
    <header><h1>Quarterly report</h1><p>Published by Finance</p></header>
    <div class="content"><p>Revenue grew by 4%.</p></div>
    <div role="navigation">Previous | Next</div><div id="sidebar-left">Archive</div>
    <footer>© Example Corp</footer></body></html>"""
    result = extract_html(_write(tmp_path, page), LIMITS)
    assert result.text == "Quarterly report\nPublished by Finance\nRevenue grew by 4%."


def test_fragment_without_html_element(tmp_path: Path) -> None:
    path = _write(tmp_path, "<p>Just a <em>fragment</em>,</p><ul><li>one</li><li>two</li></ul>")
    result = extract_html(path, LIMITS)
    assert result.text == "Just a fragment,\none\ntwo"
    assert result.sections == [] and "title" not in result.metadata


def test_declared_charset_and_xml_declaration(tmp_path: Path) -> None:
    page = (
        '<?xml version="1.0" encoding="windows-1251"?>\n<html><head>'
        '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
        "</head><body><p>Привет, мир</p></body></html>"
    )
    result = extract_html(_write(tmp_path, page, "cp1251"), LIMITS)
    assert result.text == "Привет, мир" and result.metadata["encoding"] == "cp1251"


def test_utf16_with_bom(tmp_path: Path) -> None:
    path = _write(tmp_path, "\ufeff<html><body><h2>Überblick</h2>Grüße</body></html>", "utf-16")
    result = extract_html(path, LIMITS)
    assert result.text == "Überblick\nGrüße" and result.metadata["encoding"] == "utf-16"


def test_deeply_nested_markup_is_read_in_full(tmp_path: Path) -> None:
    # Unclosed <font> tags nest; libxml2 by default stops at 256 levels and drops the rest.
    page = "<p>start</p>" + "<font>x " * 1000 + "<p>the end</p>"
    result = extract_html(_write(tmp_path, page), LIMITS)
    assert result.text.startswith("start\nx x") and result.text.endswith("x\nthe end")


def test_markup_nested_beyond_the_parser_limit_is_refused(tmp_path: Path) -> None:
    page = "<div>" * 3000 + "deep text" + "</div>" * 3000
    with pytest.raises(PermanentError) as caught:
        extract_html(_write(tmp_path, page), LIMITS)
    assert caught.value.code == "TOO_LARGE" and "2048 levels" in caught.value.message


@pytest.mark.parametrize(
    "markup",
    [
        "<html><head><script>document.write('hi')</script></head><body></body></html>",
        "<script>alert(1)</script>",
        "<!-- only a comment -->",
        "   \n\t ",
        "<nav>Home</nav><footer>Contact</footer>",
    ],
)
def test_page_without_text_is_empty(tmp_path: Path, markup: str) -> None:
    with pytest.raises(PermanentError) as caught:
        extract_html(_write(tmp_path, markup), LIMITS)
    assert caught.value.code == "EMPTY_FILE"


def test_zero_byte_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.html"
    path.write_bytes(b"")
    with pytest.raises(PermanentError) as caught:
        extract_html(path, LIMITS)
    assert caught.value.code == "EMPTY_FILE"


def test_the_character_limit_counts_text_not_markup() -> None:
    # The page has ~245,000 characters of markup and ~23,000 of text.
    page = DOCS / "docling__wiki_duck.html"
    with pytest.raises(PermanentError) as caught:
        extract_html(page, ExtractionLimits(max_chars=10_000))
    assert caught.value.code == "TOO_LARGE"
    assert "exceeds 10000 characters" in caught.value.message
    assert len(extract_html(page, ExtractionLimits(max_chars=100_000)).text) > 20_000


def test_utf8_page_wrongly_declared_latin1(tmp_path: Path) -> None:
    page = '<meta charset="iso-8859-1"><p>Crème brûlée für 5 €</p>'
    result = extract_html(_write(tmp_path, page), LIMITS)
    assert result.text == "Crème brûlée für 5 €" and result.metadata["encoding"] == "utf-8"
    # A true ISO-8859-1 page is read as windows-1252, its superset in browsers.
    latin = extract_html(_write(tmp_path, page.replace(" €", ""), "latin-1"), LIMITS)
    assert latin.text == "Crème brûlée für 5" and latin.metadata["encoding"] == "cp1252"


def test_page_wide_form_is_kept_but_search_form_is_not(tmp_path: Path) -> None:
    page = """<body>
    <form class="search"><label>Search</label><input name="q"><button>Go</button></form>
    <form id="aspnetForm" action="default.aspx"><input type="hidden" name="__VIEWSTATE">
    <div><p>Opening hours: 9 to 5.</p><select><option>English</option></select></div>
    </form></body>"""
    assert extract_html(_write(tmp_path, page), LIMITS).text == "Opening hours: 9 to 5."


def test_empty_main_falls_back_to_body(tmp_path: Path) -> None:
    page = "<body><main><script>app()</script></main><div><p>Real content here.</p></div></body>"
    assert extract_html(_write(tmp_path, page), LIMITS).text == "Real content here."


def test_a_pdf_that_is_really_html_is_handled_as_html(tmp_path: Path) -> None:
    fake = tmp_path / "report.pdf"
    fake.write_bytes((DOCS / "unstructured__fake-html-cp1252.html").read_bytes())
    mime = detect_format(fake.read_bytes()[:8192], fake.name)
    assert mime == "text/html"
    result = extract_file(fake, mime, ExtractionLimits())
    assert result.format == "text/html" and result.extractor == "lxml-html"
    assert [s.heading for s in result.sections] == ["My First Heading"] and "très" in result.text
