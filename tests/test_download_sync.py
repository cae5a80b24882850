"""``imagesvc download`` on an existing bag keeps it in sync with the library: the change feed after the bag's point
and the listing's digests say what changed; it fetches exactly that, adds what is new, reports (and with a flag
removes) what was withdrawn, and leaves a valid bag. Then the filters, the dry run, --verify and leftovers."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import bagit
from aiohttp import web
from aiohttp.test_utils import TestServer

from imagesvc.catalog import Catalog
from imagesvc.catalog.writes import restore_book, withdraw_book
from tests.http.keys import new_key
from tests.test_download import _download, _env, _journal
from tests.test_download_unattended import Live, _finish, live_fixture  # noqa: F401 (the fixture)

SPECULUM, GART, MINES = "demo-speculum-fornacum", "demo-gart-der-kreuter", "demo-traite-des-mines"


def _write(data: Path, change: str, slug: str, page: int = 0) -> None:
    catalog = Catalog(data / "catalog.sqlite3")
    try:
        book = catalog.query_one("SELECT id FROM books WHERE slug = ?", (slug,))["id"]  # withdrawn ones too
        with catalog.transaction() as conn:
            if change == "withdraw":
                assert withdraw_book(conn, book)
            elif change == "restore":
                assert restore_book(conn, book)
            else:  # the stored thumbnail of one page replaced (a re-ingest with a better scan): new digest, new hash
                conn.execute(
                    "UPDATE renditions SET sha256 = ? WHERE tier = 'thumb'"
                    " AND owner = (SELECT id FROM pages WHERE book_id = ? AND number = ?)",
                    ("f" * 64, book, page),
                )
                conn.execute("UPDATE books SET source_hash = ? WHERE id = ?", ("changed", book))
    finally:
        catalog.close()


async def _run(live: Live, dest: Path, key: str, *args: str) -> tuple[int, dict, str]:
    proc = await _download(*args, "--dest", str(dest), "--url", live.url, "--key", key, "--tier", "thumb", "--json")
    return await _finish(proc)


async def test_a_rerun_fetches_exactly_what_changed_adds_what_is_new_and_reports_what_was_withdrawn(
    live: Live, tmp_path: Path
) -> None:
    key, _ = new_key(live.data, "full")
    dest = tmp_path / "bag"
    _write(live.data, "withdraw", MINES)  # not in the library when the bag is made
    code, first, err = await _run(live, dest, key, "--all")
    assert code == 0 and first["fetched"] == 21, (first, err)  # 27 less the 6 images of the withdrawn book
    _write(live.data, "image", SPECULUM, 2)
    _write(live.data, "withdraw", GART)
    _write(live.data, "restore", MINES)
    code, second, err = await _run(live, dest, key, "--all")
    assert code == 0, err
    assert second["changed"] == 1 and second["fetched"] == 1 + 6, second  # page 2 again, and Mines' 6 images
    assert second["withdrawn"] == [GART] and second["removed"] == [] and second["valid"], second
    fetched = [e for e in _journal(dest) if "path" in e][21:]
    assert sorted((e["book"], e["page"]) for e in fetched) == [(SPECULUM, 2)] + [(MINES, n) for n in range(1, 7)]
    code, third, err = await _run(live, dest, key, "--all", "--remove-withdrawn")
    assert code == 0 and third["fetched"] == 0, (third, err)  # nothing changed since: nothing fetched
    assert third["withdrawn"] == [] and third["removed"] == []  # reported once: the bag's point moved past it
    _write(live.data, "withdraw", SPECULUM)
    code, fifth, err = await _run(live, dest, key, "--all", "--remove-withdrawn")
    assert code == 0 and fifth["withdrawn"] == [SPECULUM] and len(fifth["removed"]) == 8, (fifth, err)
    assert not (dest / "data" / SPECULUM).exists()
    bagit.Bag(str(dest)).validate()


async def test_filters_dry_run_and_verify_fetch_only_what_they_say(live: Live, tmp_path: Path) -> None:
    key, _ = new_key(live.data, "full")
    dest = tmp_path / "bag"
    code, dry, err = await _run(live, dest, key, "demo-spec*", "--from", "2", "--to", "3", "--dry-run")
    assert code == 0, err
    assert dry["outcome"] == "dry_run" and dry["pages"] == dry["units"] == 2 and dry["bytes"] > 0, dry
    assert dry["requests"] == 1 and dry["seconds_at_request_limit"] is not None
    assert not list(dest.rglob("*.jpg"))  # nothing fetched
    code, done, err = await _run(live, dest, key, "demo-spec*", "--from", "2", "--to", "3")
    assert code == 0 and done["fetched"] == 2, (done, err)
    assert sorted(e["page"] for e in _journal(dest) if "path" in e) == [2, 3]
    code, verified, err = await _run(live, dest, key, "--verify")
    assert code == 0 and verified["checked"] == 2 and verified["problems"] == [], (verified, err)
    image = next((dest / "data").rglob("*.jpg"))
    image.write_bytes(image.read_bytes()[:-1] + b"\0")
    code, verified, err = await _run(live, dest, key, "--verify")
    assert code == 1 and any("do not match" in p for p in verified["problems"]), verified
    assert verified["requests"] == 0  # fetched nothing
    (dest / "data" / SPECULUM / "left-by-a-kill.jpg.part").write_bytes(b"half")
    code, again, err = await _run(live, dest, key, "demo-spec*", "--from", "2", "--to", "3")
    assert code == 0 and again["valid"] and again["fetched"] == 1, (again, err)  # the damaged file, again
    assert again["leftovers_removed"] == [f"data/{SPECULUM}/left-by-a-kill.jpg.part"]


async def test_a_bad_entry_in_a_list_does_not_stop_the_books_after_it(live: Live, tmp_path: Path) -> None:
    key, _ = new_key(live.data, "full")
    books = tmp_path / "books.txt"
    books.write_text(f"no-such-book\n{GART}\n")
    code, summary, err = await _run(live, tmp_path / "bag", key, "--list", str(books))
    assert code == 1, err
    assert summary["fetched"] == 7 and summary["valid"], summary
    assert len(summary["failures"]) == 1 and "no-such-book" in summary["failures"][0]


async def test_a_missing_bagit_is_said_before_anything_is_fetched(tmp_path: Path) -> None:
    asked: list[str] = []

    async def count(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/{tail:.*}", count)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        code = (
            "import sys; sys.modules['bagit'] = None; from imagesvc.cli import main; "
            f"sys.exit(main(['download', '--all', '--dest', {str(tmp_path / 'bag')!r}, '--url', "
            f"{str(server.make_url('/api'))!r}, '--key', 'k']))"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    finally:
        await server.close()
    assert proc.returncode == 2 and asked == [], (err.decode(), asked)
    assert "pip install 'bagit==1.9.0'" in err.decode() and "Nothing was fetched" in err.decode()
