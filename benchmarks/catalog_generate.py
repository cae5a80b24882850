"""A catalog at the library's real shape, written through the catalog layer (no images): for the scale benchmark.

The real library: ~15,000 books x ~300 pages (~4.5 million pages), each page with OCR (~2.2 KB), an English
translation (~2.0 KB) and, on most pages, the original text in the book's language (~2.0 KB on 60% of pages), so
~5.4 KB of text a page; ~200,000 illustrations (~13 a book). Books are in Latin, German, French, Italian, Hebrew,
Arabic and Chinese; words are drawn from small per-language vocabularies with a Zipf-like skew plus invented rarer
words (names, OCR noise), so the index has a long tail of terms like real text. Text is drawn as whole sentences
from a seeded pool of 40,000 sentences a language (each with one rare word), which is what makes generation fast.
Seeded by book: the same arguments write the same catalog, whatever the number of workers or restarts.

Each book is written with ``catalog.writes.upsert_book``/``upsert_pages`` in one transaction (the path and batching
ingest uses, so the page-text index is kept as ingest keeps it). Worker processes (``--workers``) make the books'
text; the main process is the one writer. SQLite in ``DATA_DIR/catalog.sqlite3``, or ``--backend postgres``: a
PostgreSQL cluster of its own in ``DATA_DIR/pg`` (created on the first run, started and stopped by each run).

    nice -n 15 .venv/bin/python benchmarks/catalog_generate.py DATA_DIR --books 15000 [--pages 300]
        [--illustrations 200000] [--backend sqlite|postgres] [--workers 2]

Prints progress and, at the end, the catalog's size. Resumable: books already in the catalog are skipped (a killed
run loses at most the book it was writing, which its transaction never committed).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import multiprocessing
import random
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.catalog_postgres import database_bytes, persistent_postgres
from imagesvc.catalog import Catalog, illustration_id, page_id, page_text
from imagesvc.catalog import writes as w
from imagesvc.catalog.schema import MIGRATIONS, statements

LANGUAGES = {  # language: (share of books, vocabulary, script written without spaces)
    "Latin": (
        0.35,
        "et in est ad cum non quod aqua ignis terra aer sal sulphur mercurius aurum argentum lapis "
        "philosophorum opus magnum vas furnus calor tempus corpus anima spiritus materia prima sol luna "
        "tinctura solutio coagulatio sublimatio destillatio putrefactio nigredo albedo rubedo elixir "
        "medicina metallum plumbum stannum ferrum cuprum vitriolum alumen arsenicum antimonium ſecundum "
        "ſuper quæ eſt ſunt liber caput pars modus ratio natura ars ſecreta",
        False,
    ),
    "German": (
        0.15,
        "und der die das in zu von mit ist nicht auch auf ein eine wasser feuer erde luft salz "
        "schwefel quecksilber gold silber stein weisen werk ofen glas hitze zeit leib seele geist kraut "
        "wurtzel blum samen artzney kranckheit hertz haupt magen blut krafft tugent nutz gebrauch",
        False,
    ),
    "French": (
        0.10,
        "et le la les de des du en un une est que qui pour par avec dans sur eau feu terre air sel "
        "soufre mercure or argent pierre œuvre fourneau vaisseau chaleur temps corps ame esprit mine "
        "veine metal plomb fer cuivre estain fondre trouver monstrer ouvrier montagne",
        False,
    ),
    "Italian": (
        0.10,
        "e il la di che in per con non una uno del della acqua fuoco terra aria sale zolfo oro "
        "argento pietra opera fornace vaso calore tempo corpo anima spirito arte segreta metallo",
        False,
    ),
    "Hebrew": (
        0.10,
        "ספר מערכת הכוכבים השמש הירח הגלגל המולד חשבון החדשים השנה פרק ראשון שני כי את על אל "
        "מן בן החכם יהודה שמואל צורת הקבועים צפון דרום מזרח מערב אור חושך מים אש ארץ רוח שמים "
        "בְּרֵאשִׁית בָּרָא אֱלֹהִים תהלה לאל נשלם מהלך תלוי",
        False,
    ),
    "Arabic": (
        0.10,
        "كتاب الكيمياء الحكمة في من على إلى عن هذا الذي التي ماء نار أرض هواء ملح كبريت زئبق ذهب "
        "فضة حجر الفلاسفة العمل القارورة الحرارة الزمان الجسد الروح النفس المعدن الرصاص الحديد النحاس "
        "الْكِيمِيَاءِ وَالْحِكْمَةِ كـــتاب الباب الفصل الأول الثاني",
        False,
    ),
    "Chinese": (
        0.10,
        "之乎者也而以於其為不有此金銀水火土木天地人日月星辰山川草藥石丹爐鼎鉛汞硫黃朱砂煉成"
        "道德性命陰陽五行氣血精神心肝脾肺腎寒熱溫涼酸苦甘辛鹹書卷篇章第一二三四五上下中",
        True,
    ),
}
ENGLISH = (  # noqa: SIM905  (a paragraph of words reads better than a list literal)
    "the of and to in a is that for it as with was on by be this which from or are an at his not but all "
    "water fire earth air salt sulphur mercury gold silver stone philosophers work furnace vessel heat time body "
    "soul spirit matter first sun moon tincture solution distillation medicine metal lead iron copper chapter "
    "book art secret nature mine vein root herb star heaven wisdom alchemy figure proportion receiver alembic"
).split()
OCR_BYTES, TRANSLATION_BYTES, ORIGINAL_BYTES, ORIGINAL_SHARE = 2200, 2000, 2000, 0.6
TYPES = ("emblem", "diagram", "plant", "portrait", "apparatus", "map", "ornament")


POOL = 40_000  # sentences a language


class Words:
    """Text in one language: sentences of vocabulary words (Zipf-skewed), each with one invented rarer word, drawn
    from a pool made once."""

    def __init__(self, vocabulary: list[str], joined: bool, rng: random.Random) -> None:
        weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocabulary))))
        letters = "".join(sorted(set("".join(vocabulary))))
        rare = ["".join(rng.choices(letters, k=rng.randint(2 if joined else 4, 3 if joined else 11)))
                for _ in range(20_000)]  # fmt: skip
        sep, stop = ("", "。") if joined else (" ", ". ")
        self.sentences: list[str] = []
        for _ in range(POOL):
            drawn = rng.choices(vocabulary, cum_weights=weights, k=12)
            drawn[rng.randrange(12)] = rng.choice(rare)
            self.sentences.append(sep.join(drawn) + stop)
        self.mean_bytes = sum(len(x.encode()) for x in self.sentences) / POOL

    def text(self, size: int, rng: random.Random) -> str:
        """About ``size`` bytes of UTF-8 text, in sentences."""
        return "".join(rng.choices(self.sentences, k=max(1, round(size / self.mean_bytes))))


_TEXTS: dict[str, Words] = {}


def _texts(seed: int) -> dict[str, Words]:
    """The sentence pools (made once a process)."""
    if not _TEXTS:
        for i, (name, (_, vocabulary, joined)) in enumerate(LANGUAGES.items()):
            _TEXTS[name] = Words(list(vocabulary) if joined else vocabulary.split(), joined, random.Random(seed + i))
        _TEXTS["English"] = Words(ENGLISH, False, random.Random(seed - 1))
    return _TEXTS


def _book(n: int, language: str, rng: random.Random) -> dict[str, Any]:
    slug = f"gen-{n:05d}"
    return {
        "id": f"{n:016x}",
        "slug": slug,
        "title": f"{language} treatise {n} on {rng.choice(ENGLISH[20:])} and {rng.choice(ENGLISH[20:])}",
        "author": f"Author {rng.randrange(3000)}",
        "author_id": f"author-{rng.randrange(3000)}",
        "language": language,
        "year": rng.randint(1450, 1800),
        "attribution": {"institution": f"Library {rng.randrange(40)}", "item_url": f"https://example.org/{slug}"},
        "category": rng.choice(["alchemy", "medicine", "astronomy", "botany", "mining"]),
        "translator": "Generated",
        "summary": f"A generated {language} book for the scale benchmark.",
    }


def _illustration(book_id: str, number: int, index: int, rng: random.Random) -> dict[str, Any]:
    subject = rng.sample(ENGLISH[20:], 3)
    return {
        "id": illustration_id(book_id, number, index),
        "index": index,
        "bbox": {"x": 0.1, "y": 0.1, "width": 0.5, "height": 0.4},
        "type": rng.choice(TYPES),
        "description": f"A {subject[0]} with {subject[1]} beside a {subject[2]}.",
        "subjects": subject[:2],
        "figures": [],
        "symbols": [subject[2]],
        "year": None,
    }


def _language(n: int, seed: int) -> str:
    names = list(LANGUAGES)
    cum = list(itertools.accumulate(LANGUAGES[name][0] for name in names))
    return names[min(len(names) - 1, bisect.bisect(cum, random.Random(f"{seed}:{n}:language").random() * cum[-1]))]


def make_book(job: tuple[int, int, int, int]) -> tuple[dict[str, Any], list[w.PageRows]]:
    """Book ``n`` (with ``pages`` pages and ``count`` illustrations) as ``upsert_book`` and ``upsert_pages`` take it;
    the same for the same arguments."""
    n, pages, count, seed = job
    language = _language(n, seed)
    rng = random.Random(f"{seed}:{n}")
    book = _book(n, language, rng)
    texts = _texts(seed)
    text, english = texts[language], texts["English"]
    with_illus = set(rng.sample(range(1, pages + 1), min(count, pages)))
    rows: list[w.PageRows] = []
    for number in range(1, pages + 1):
        page = {
            "id": page_id(book["id"], number),
            "book_id": book["id"],
            "number": number,
            "ocr": text.text(OCR_BYTES, rng),
            "translation": english.text(TRANSLATION_BYTES, rng),
            "original": text.text(ORIGINAL_BYTES, rng) if rng.random() < ORIGINAL_SHARE else None,
            "image_unavailable": 1,
            "unavailable_reason": "generated: no image",
            "master_key": None,
            "master_sha256": None,
            "master_format": None,
            "derivation": None,
            "width": 1600,
            "height": 2400,
        }
        rows.append((page, {}, [_illustration(book["id"], number, 0, rng)] if number in with_illus else []))
    return book, rows


def _made(jobs: list[tuple[int, int, int, int]], workers: int) -> Iterator[tuple[dict[str, Any], list[w.PageRows]]]:
    if workers <= 0:
        yield from map(make_book, jobs)
        return
    ahead = 4 * workers  # books made but not yet written: imap alone would queue every book a slow writer lags
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for at in range(0, len(jobs), ahead):
            yield from pool.imap(make_book, jobs[at : at + ahead], chunksize=1)


def open_catalog(data_dir: Path, backend: str) -> tuple[Catalog, Any]:
    """The generated catalog under ``data_dir`` and a function that closes it (and stops its PostgreSQL)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if backend == "sqlite":
        catalog = Catalog(data_dir / "catalog.sqlite3")
        return catalog, catalog.close
    from imagesvc.catalog.postgres import PostgresCatalog

    server = persistent_postgres(data_dir / "pg")
    catalog = PostgresCatalog(server.url, pool_size=2)

    def close() -> None:
        catalog.close()
        server.stop()

    return catalog, close


def write_library(catalog: Catalog, books: int, pages: int, illustrations: int, seed: int = 1, workers: int = 0) -> int:
    """Write (or finish) the generated catalog; returns the number of books written by this run."""
    done = set(catalog.column("SELECT id FROM books"))
    per_book = illustrations / books
    jobs = [
        (n, pages, int(per_book * (n + 1)) - int(per_book * n), seed) for n in range(books) if f"{n:016x}" not in done
    ]
    print(f"{len(done)} books already written, {len(jobs)} to write", file=sys.stderr, flush=True)
    started = time.monotonic()
    for written, (book, rows) in enumerate(_made(jobs, workers), 1):
        with catalog.transaction() as conn:
            w.upsert_book(conn, book, f"generated:{seed}")
            w.upsert_pages(conn, rows)
        if written % 50 == 0 or written == len(jobs):
            rate = written / (time.monotonic() - started)
            print(f"book {len(done) + written}/{books}; {rate:.2f} books/s", file=sys.stderr, flush=True)
    return len(jobs)


def reindex(data_dir: Path) -> int:
    """Rebuild the page-text index of a generated SQLite catalog in place (after the index's layout changed)."""
    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        with catalog.transaction() as conn:
            conn.execute("DROP TABLE IF EXISTS pages_fts")
            conn.execute("DROP TABLE IF EXISTS page_text_books")
            for statement in statements(MIGRATIONS[6]):  # 0007_page_text.sql
                conn.execute(statement)
            return page_text.build(conn)
    finally:
        catalog.close()


def catalog_bytes(catalog: Catalog, data_dir: Path) -> int:
    """The catalog's size on disk: the SQLite file with its WAL, or the PostgreSQL database."""
    if catalog.dialect == "postgres":
        return database_bytes(catalog)
    return sum(p.stat().st_size for p in data_dir.glob("catalog.sqlite3*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--books", type=int, default=1500)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--illustrations", type=int, default=0, help="default: 200,000 scaled to the books")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--workers", type=int, default=1, help="text-making processes beside the writer (0: none)")
    parser.add_argument("--reindex", action="store_true", help="only rebuild the page-text index of DATA_DIR")
    args = parser.parse_args()
    if args.reindex:
        started = time.monotonic()
        print(f"reindexed {reindex(args.data_dir)} pages in {time.monotonic() - started:.0f} s")
        return
    illustrations = args.illustrations or round(200_000 * args.books / 15_000)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped"))  # so that PostgreSQL is stopped too
    started = time.monotonic()
    catalog, close = open_catalog(args.data_dir, args.backend)
    try:
        written = write_library(catalog, args.books, args.pages, illustrations, args.seed, args.workers)
        took = time.monotonic() - started
        size = catalog_bytes(catalog, args.data_dir)
    finally:
        close()
    print(f"{args.backend} {args.data_dir}: {args.books} books x {args.pages} pages, {illustrations} illustrations, "
          f"{size / 1e9:.2f} GB; {written} books written in {took:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
