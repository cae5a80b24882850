"""A catalog at the library's real shape, written through the catalog layer (no images): for the scale benchmark.

The real library: ~15,000 books x ~300 pages (~4.5 million pages), each page with OCR (~2.2 KB), an English
translation (~2.0 KB) and, on most pages, the original text in the book's language (~2.0 KB on 60% of pages), so
~5.4 KB of text a page; ~200,000 illustrations (~13 a book). Books are in Latin, German, French, Italian, Hebrew,
Arabic and Chinese; words are drawn from small per-language vocabularies with a Zipf-like skew plus invented rarer
words (names, OCR noise), so the index has a long tail of terms like real text. Seeded: the same arguments write the
same catalog.

Pages are written with ``catalog.writes.upsert_book``/``upsert_page`` (the path ingest takes, so the page-text index
is kept as ingest keeps it), one transaction per book.

    .venv/bin/python benchmarks/catalog_generate.py DATA_DIR --books 1500 [--pages 300] [--illustrations 20000]

Prints progress and, at the end, the catalog file's size. Resumable: books already in the catalog are skipped.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path
from typing import Any

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


class Words:
    """Text in one language: vocabulary words (Zipf-skewed) with invented rarer words mixed in."""

    def __init__(self, vocabulary: list[str], joined: bool, rng: random.Random) -> None:
        self.rng, self.joined = rng, joined
        self.vocabulary = vocabulary
        self.weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(vocabulary))))
        letters = "".join(sorted(set("".join(vocabulary))))
        self.rare = ["".join(rng.choices(letters, k=rng.randint(2 if joined else 4, 3 if joined else 11)))
                     for _ in range(20_000)]  # fmt: skip

    def text(self, size: int) -> str:
        """About ``size`` bytes of UTF-8 text, in sentences."""
        sep = "" if self.joined else " "
        stop = "。" if self.joined else ". "
        out: list[str] = []
        length = 0
        while length < size:
            words = self.rng.choices(self.vocabulary, cum_weights=self.weights, k=12)
            words[self.rng.randrange(12)] = self.rng.choice(self.rare)
            sentence = sep.join(words) + stop
            out.append(sentence)
            length += len(sentence.encode())
        return "".join(out)


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


def write_library(data_dir: Path, books: int, pages: int, illustrations: int, seed: int = 1) -> Path:
    """Write (or finish) the generated catalog under ``data_dir``; returns its path."""
    path = data_dir / "catalog.sqlite3"
    catalog = Catalog(path)
    done = {row["id"] for row in catalog.query_all("SELECT id FROM books")}
    rng = random.Random(seed)
    names = list(LANGUAGES)
    shares = [LANGUAGES[name][0] for name in names]
    texts = {name: Words(LANGUAGES[name][1].split() if not LANGUAGES[name][2] else list(LANGUAGES[name][1]),
                         LANGUAGES[name][2], random.Random(seed + i)) for i, name in enumerate(names)}  # fmt: skip
    english = Words(ENGLISH, False, random.Random(seed - 1))
    per_book = illustrations / books
    started = time.monotonic()
    for n in range(books):
        language = rng.choices(names, shares)[0]
        book = _book(n, language, rng)
        # the draws above happen for every book, so a resumed run writes the same books as a full one
        count = int(per_book * (n + 1)) - int(per_book * n)
        if book["id"] in done:
            continue
        book_rng = random.Random(f"{seed}:{n}")
        text = texts[language]
        text.rng = english.rng = book_rng
        with_illus = set(book_rng.sample(range(1, pages + 1), min(count, pages)))
        with catalog.transaction() as conn:
            w.upsert_book(conn, book, f"generated:{seed}")
            for number in range(1, pages + 1):
                page = {
                    "id": page_id(book["id"], number),
                    "book_id": book["id"],
                    "number": number,
                    "ocr": text.text(OCR_BYTES),
                    "translation": english.text(TRANSLATION_BYTES),
                    "original": text.text(ORIGINAL_BYTES) if book_rng.random() < ORIGINAL_SHARE else None,
                    "image_unavailable": 1,
                    "unavailable_reason": "generated: no image",
                    "master_key": None,
                    "master_sha256": None,
                    "master_format": None,
                    "derivation": None,
                    "width": 1600,
                    "height": 2400,
                }
                ills = [_illustration(book["id"], number, 0, book_rng)] if number in with_illus else []
                w.upsert_page(conn, page, {}, ills)
        if n % 50 == 0 or n == books - 1:
            rate = (n + 1) / (time.monotonic() - started)
            print(f"book {n + 1}/{books} ({language}); {rate:.1f} books/s", file=sys.stderr, flush=True)
    catalog.close()
    return path


def reindex(data_dir: Path) -> int:
    """Rebuild the page-text index of a generated catalog in place (after the index's layout changed)."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--books", type=int, default=1500)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--illustrations", type=int, default=0, help="default: 200,000 scaled to the books")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reindex", action="store_true", help="only rebuild the page-text index of DATA_DIR")
    args = parser.parse_args()
    if args.reindex:
        started = time.monotonic()
        print(f"reindexed {reindex(args.data_dir)} pages in {time.monotonic() - started:.0f} s")
        return
    illustrations = args.illustrations or round(200_000 * args.books / 15_000)
    started = time.monotonic()
    path = write_library(args.data_dir, args.books, args.pages, illustrations, args.seed)
    size = sum(p.stat().st_size for p in path.parent.glob("catalog.sqlite3*"))
    print(f"{path}: {args.books} books x {args.pages} pages, {illustrations} illustrations, "
          f"{size / 1e9:.2f} GB, written in {time.monotonic() - started:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
