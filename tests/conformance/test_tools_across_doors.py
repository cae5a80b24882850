"""Each operation of the spec's tables (§4), called as the spec shows, answers the same on every door.

Doors are compared with each other, never with the registry that generated them: REST (``GET {base_url}/...``), a
plain JSON-RPC POST, the official MCP client and ``imagesvc <tool> --json``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.doors import Answer, Doors

BOOK = "demo-speculum-fornacum"  # 8 pages, with year, translator and DOI


def same(answers: list[Answer]) -> Any:
    """The one body every door gave (all succeeded and agree), for further checks."""
    assert all(a.ok for a in answers), [a.body for a in answers]
    first = answers[0].body
    for other in answers[1:]:
        assert other.body == first
    return first


def same_error(answers: list[Answer]) -> tuple[str, Any]:
    """The one (code, parameter) every door's error gave."""
    assert not any(a.ok for a in answers), [a.body for a in answers]
    errors = {a.error() for a in answers}
    assert len(errors) == 1, [a.body for a in answers]
    assert all(a.body["message"] and a.body["recovery"] for a in answers)
    return errors.pop()


async def test_get_book_by_slug_and_by_hex_id_in_either_case(doors: Doors) -> None:
    book = same([await doors.rest(f"/api/books/{BOOK}"), *await doors.every_mcp_door("get_book", {"book_id": BOOK})])
    hex_id = book["id"]
    assert hex_id != hex_id.upper()  # the demo's ids have letters, so the upper-case form is a different string
    for spelled in (hex_id, hex_id.upper()):
        again = [await doors.rest(f"/api/books/{spelled}"), await doors.rpc("get_book", {"book_id": spelled})]
        assert same(again) == book


async def test_list_books(doors: Doors) -> None:
    listed = same(
        [await doors.rest("/api/books", {"limit": "2"}), *await doors.every_mcp_door("list_books", {"limit": 2})]
    )
    assert listed["total"] >= 4


async def test_get_quote_and_its_flat_alias_verify(doors: Doors) -> None:
    """GET /books/:id/quote?page=&include_original=&include_context= and /verify?book_id=&page= are one operation."""
    query = {"page": "2", "include_original": "false", "include_context": "true"}
    arguments = {"book_id": BOOK, "page": 2, "include_original": False, "include_context": True}
    quote = same(
        [
            await doors.rest(f"/api/books/{BOOK}/quote", query),
            await doors.rest("/api/verify", {"book_id": BOOK, **query}),
            *await doors.every_mcp_door("get_quote", arguments),
        ]
    )
    assert [page["page"] for page in quote["quote"]["context"]] == [1, 3]
    assert quote["quote"].get("original") is None


async def test_get_quote_defaults_include_the_original_and_no_context(doors: Doors) -> None:
    plain = same(
        [
            await doors.rest(f"/api/books/{BOOK}/quote", {"page": "2"}),
            await doors.rpc("get_quote", {"book_id": BOOK, "page": 2}),
        ]
    )
    spelled = same(
        [
            await doors.rest(
                f"/api/books/{BOOK}/quote", {"page": "2", "include_original": "true", "include_context": "false"}
            )
        ]
    )
    assert plain == spelled


async def test_citation_formats_are_the_spec_s(doors: Doors) -> None:
    """Inline ``(<Author> <Year>, p. <N>)``; footnote ``<Author>, <Title>, trans. <translator> (<Year>), p. <N>. DOI:
    <DOI>``; bibliography ``<Author>. <Title>. Translated by <translator>. <Year>. DOI: <DOI>`` (spec §2)."""
    book = (await doors.rest(f"/api/books/{BOOK}")).body
    author, title, year, translator, doi = (book[k] for k in ("author", "title", "year", "translator", "doi"))
    answers = await doors.every_mcp_door("get_quote", {"book_id": BOOK, "page": 5})
    citation = same([await doors.rest(f"/api/books/{BOOK}/quote", {"page": "5"}), *answers])["citation"]
    assert citation["inline"] == f"({author} {year}, p. 5)"
    assert citation["footnote"] == f"{author}, {title}, trans. {translator} ({year}), p. 5. DOI: {doi}"
    assert citation["bibliography"] == f"{author}. {title}. Translated by {translator}. {year}. DOI: {doi}"
    assert citation["citation_url"].endswith(f"/book/{BOOK}?page=5")


async def test_get_quotes_takes_up_to_25_pages_and_refuses_26(doors: Doors) -> None:
    """get_quotes: ``book_id`` with ``pages[]`` or ``from``/``to``, at most 25 pages per call (spec §8)."""
    ranged = same(await doors.every_mcp_door("get_quotes", {"book_id": BOOK, "from": 1, "to": 25}))
    assert [q["citation"]["citation_url"].rsplit("=", 1)[1] for q in ranged["quotes"]] == [str(n) for n in range(1, 9)]
    listed = same(await doors.every_mcp_door("get_quotes", {"book_id": BOOK, "pages": [2, 4]}, cli=True))
    assert len(listed["quotes"]) == 2
    assert same_error(await doors.every_mcp_door("get_quotes", {"book_id": BOOK, "from": 1, "to": 26}))[0] == (
        "invalid_request"
    )
    code, parameter = same_error(
        await doors.every_mcp_door("get_quotes", {"book_id": BOOK, "pages": list(range(1, 27))})
    )
    assert (code, parameter) == ("invalid_request", "pages")


@pytest.mark.parametrize("content", ["ocr", "translation", "both"])
async def test_get_book_text_json_and_plain(doors: Doors, content: str) -> None:
    query = {"content": content, "from": "1", "to": "3", "format": "json"}
    arguments = {"book_id": BOOK, "content": content, "from": 1, "to": 3, "format": "json"}
    text = same(
        [
            await doors.rest(f"/api/books/{BOOK}/text", query),
            *await doors.every_mcp_door("get_book_text", arguments, cli=content == "both"),
        ]
    )
    assert [p["page"] for p in text["pages"]] == [1, 2, 3]
    plain = await doors.rest(f"/api/books/{BOOK}/text", {**query, "format": "plain"})
    as_tool = same([await doors.rpc("get_book_text", {**arguments, "format": "plain"})])
    assert plain.ok and plain.headers["Content-Type"].startswith("text/plain")
    assert plain.body == as_tool["text"]


async def test_get_book_text_from_past_the_end_names_from_not_an_unsent_to(doors: Doors) -> None:
    answers = [
        await doors.rest(f"/api/books/{BOOK}/text", {"from": "9"}),
        *await doors.every_mcp_door("get_book_text", {"book_id": BOOK, "from": 9}),
    ]
    assert same_error(answers)[0] == "not_found"
    for answer in answers:
        assert "'to'" not in answer.body["message"] and "9" in answer.body["message"]
        assert "1–8" in answer.body["message"]


async def test_search_images_with_the_spec_names(doors: Doors) -> None:
    """search_images: query, type, subject, figure, symbol, year_from, year_to, book_id, limit; and maxPerBook."""
    arguments = {"query": "plant", "year_from": 1500, "year_to": 1700, "limit": 10, "maxPerBook": 5}
    query = {name: str(value) for name, value in arguments.items()}
    found = same([await doors.rest("/api/gallery", query), *await doors.every_mcp_door("search_images", arguments)])
    assert all(1500 <= item["year"] <= 1700 for item in found["items"])
    filtered = same(
        [
            await doors.rest("/api/gallery", {"book_id": BOOK, "maxPerBook": "1000"}),
            await doors.rpc("search_images", {"book_id": BOOK, "maxPerBook": 1000}),
        ]
    )
    assert filtered["items"] and {item["book_id"] for item in filtered["items"]} == {
        (await doors.rest(f"/api/books/{BOOK}")).body["id"]
    }


async def test_gallery_max_per_book_defaults_to_3(doors: Doors) -> None:
    """/gallery: maxPerBook defaults to 3 per book; a higher value such as 1000 enumerates the corpus (spec §4, §8)."""
    default = same([await doors.rest("/api/gallery", {"limit": "50"}), await doors.rpc("search_images", {"limit": 50})])
    explicit = same([await doors.rest("/api/gallery", {"limit": "50", "maxPerBook": "3"})])
    assert default == explicit
    per_book: dict[str, int] = {}
    for item in default["items"]:
        per_book[item["book_id"]] = per_book.get(item["book_id"], 0) + 1
    assert max(per_book.values()) == 3
    everything = same([await doors.rest("/api/gallery", {"limit": "50", "maxPerBook": "1000"})])
    assert len(everything["items"]) > len(default["items"])


async def test_aliases_are_accepted_on_every_door(doors: Doors) -> None:
    """One canonical name per argument, and at most one documented alias, accepted alike by REST, MCP and the CLI."""
    canonical = {"query": "plant", "maxPerBook": 2, "book_id": BOOK}
    aliased = {"q": "plant", "max_per_book": 2, "book": BOOK}
    want = same([await doors.rpc("search_images", canonical)])
    got = [
        await doors.rest("/api/gallery", {k: str(v) for k, v in aliased.items()}),
        *await doors.every_mcp_door("search_images", aliased),
    ]
    assert same(got) == want
    both = [
        await doors.rest("/api/gallery", {"q": "a", "query": "b"}),
        await doors.rpc("search_images", {"q": "a", "query": "b"}),
    ]
    assert same_error(both) == ("invalid_request", "q")


async def test_image_tools(doors: Doors) -> None:
    images = same(
        [
            await doors.rest(f"/api/books/{BOOK}/images", {"limit": "3"}),
            *await doors.every_mcp_door("get_book_images", {"book_id": BOOK, "limit": 3}),
        ]
    )
    first = images["items"][0]["id"]
    image = same(
        [await doors.rest(f"/api/gallery/images/{first}"), *await doors.every_mcp_door("get_image", {"id": first})]
    )
    assert image["id"] == first
    upper = first.upper()
    assert (
        same([await doors.rest(f"/api/gallery/images/{upper}"), await doors.rpc("get_image", {"id": upper})]) == image
    )


async def test_collections_and_vectors(doors: Doors) -> None:
    listed = same([await doors.rest("/api/gallery/collections"), *await doors.every_mcp_door("list_collections", {})])
    slug = listed["items"][0]["slug"]
    one = same(
        [
            await doors.rest(f"/api/gallery/collections/{slug}"),
            await doors.rpc("get_collection", {"slug": slug}),
            await doors.client("get_collection", {"slug": slug}),
        ]
    )
    assert one["imageCount"] == len(one["items"])
    vectors = [
        await doors.rest("/api/vectors/gallery", {"limit": "2"}),
        await doors.rpc("get_vectors", {"store": "gallery", "limit": 2}),
    ]
    if vectors[0].ok:
        same(vectors)
    else:  # no embeddings without CLIP weights: then every door says so alike
        same_error(vectors)


@pytest.mark.parametrize(
    ("path", "query", "tool", "arguments", "parameter"),
    [
        ("/api/books", {"limit": "0"}, "list_books", {"limit": 0}, "limit"),
        (f"/api/books/{BOOK}/quote", {"page": "two"}, "get_quote", {"book_id": BOOK, "page": "two"}, "page"),
        (
            f"/api/books/{BOOK}/text",
            {"content": "pictures"},
            "get_book_text",
            {"book_id": BOOK, "content": "pictures"},
            "content",
        ),
        ("/api/gallery", {"limit": "51"}, "search_images", {"limit": 51}, "limit"),
        ("/api/gallery", {"maxPerBook": "x"}, "search_images", {"maxPerBook": "x"}, "maxPerBook"),
        ("/api/gallery", {"year_form": "1600"}, "search_images", {"year_form": 1600}, "year_form"),
    ],
)
async def test_bad_arguments_are_the_same_error_on_every_door(
    doors: Doors, path: str, query: dict[str, str], tool: str, arguments: dict[str, Any], parameter: str
) -> None:
    answers = [await doors.rest(path, query), await doors.rpc(tool, arguments), await doors.client(tool, arguments)]
    assert same_error(answers) == ("invalid_request", parameter)
    assert answers[0].status == 400


async def test_unknown_book_is_not_found_on_every_door_and_the_cli_prints_it_as_json(doors: Doors) -> None:
    answers = [
        await doors.rest("/api/books/no-such-book"),
        *await doors.every_mcp_door("get_book", {"book_id": "no-such-book"}),
    ]
    assert same_error(answers)[0] == "not_found"
    assert answers[0].status == 404


async def test_search_within_book_on_every_door(doors: Doors) -> None:
    """GET /books/:id/search and the search_within_book tool are one operation; so is its not_found."""
    found = same(
        [
            await doors.rest(f"/api/books/{BOOK}/search", {"q": "furnace", "limit": "5"}),
            *await doors.every_mcp_door("search_within_book", {"book_id": BOOK, "q": "furnace", "limit": 5}),
        ]
    )
    assert [hit["page"] for hit in found["hits"]] == [2]
    assert found["hits"][0]["citation_url"].endswith(f"/book/{BOOK}?page=2")
    missing = [
        await doors.rest("/api/books/no-such-book/search", {"q": "furnace"}),
        *await doors.every_mcp_door("search_within_book", {"book_id": "no-such-book", "q": "furnace"}),
    ]
    assert same_error(missing)[0] == "not_found"
    empty = [
        await doors.rest(f"/api/books/{BOOK}/search", {"q": '"*"'}),
        *await doors.every_mcp_door("search_within_book", {"book_id": BOOK, "q": '"*"'}, cli=False),
    ]
    assert same_error(empty)[0] == "invalid_request"
