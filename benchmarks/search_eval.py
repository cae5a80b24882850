"""Relevance of gallery search on the demo library: recall@5 and nDCG@10 per ranking mode and query category, and
recall@1/@5 per language on the cross-lingual set.

    python benchmarks/search_eval.py [--data DIR] [--grid] [--model e5+minilm|e5] [--prefilter N]

Builds the demo library (fixtures/generate.py, then ingest) in a temporary folder unless ``--data`` names an ingested
data dir, and runs every query of ``benchmarks/search_eval.json`` through ``search_images`` in three modes: keyword
only (``IMAGESVC_TEXT_MODEL=off``), dense text only (the fusion with no keyword scores) and fused (the service's
default). CLIP is not evaluated: no CLIP weights can be had here. ``--grid`` also prints fused recall and nDCG for other
keyword weights and dense floors, and for reciprocal rank fusion, the figures behind the constants in
``imagesvc/search/fusion.py``. recall@5 counts relevant illustrations in the top five over min(5, relevant); an
illustration folded into a listed one as a near-duplicate counts at that one's rank. ``benchmarks/search_eval_languages
.json`` asks 34 concepts in eight languages; for it, recall@1 is whether the first result is relevant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagesvc.catalog import Catalog  # noqa: E402
from imagesvc.search import fusion  # noqa: E402
from imagesvc.search.dense import illustration_text, text_rows  # noqa: E402
from imagesvc.search.engine import engine_for  # noqa: E402
from imagesvc.search.text import KeywordHits  # noqa: E402
from imagesvc.services import Services  # noqa: E402
from imagesvc.storage.local import LocalStore  # noqa: E402
from imagesvc.tools.gallery import search_images  # noqa: E402

EVAL = ROOT / "benchmarks" / "search_eval.json"
LANGUAGES = ROOT / "benchmarks" / "search_eval_languages.json"
MODES = ("keyword", "dense", "fused")


def stems(text: str) -> set[str]:
    """Crude word stems (first five letters of words of three or more, in any script): enough to catch shared roots."""
    return {w[:5] for w in re.findall(r"[^\W\d_]+", text.casefold()) if len(w) >= 3}


STOP = {"the", "and", "for", "with", "its", "from", "off", "like", "our", "shape"}


def check_paraphrases(queries: list[dict[str, Any]], texts: dict[str, str]) -> list[str]:
    """Paraphrase queries that share a stem with a relevant illustration's text (should be none)."""
    bad = []
    for q in queries:
        if q["category"] != "paraphrase":
            continue
        mine = stems(q["query"]) - {s[:5] for s in STOP}
        for ref in q["relevant"]:
            shared = mine & stems(texts[ref])
            if shared:
                bad.append(f"{q['query']!r} shares {sorted(shared)} with {ref}")
    return bad


def language_overlaps(spec: dict[str, Any], texts: dict[str, str]) -> list[str]:
    """Cross-lingual queries that share a stem with a relevant illustration's text (should be none)."""
    bad = []
    for concept in spec["concepts"]:
        for lang, query in concept["queries"].items():
            mine = stems(query) - {s[:5] for s in STOP}
            for ref in concept["relevant"]:
                if shared := mine & stems(texts[ref]):
                    bad.append(f"{lang} {query!r} shares {sorted(shared)} with {ref}")
    return bad


def first_hit(ranked: list[list[str]], relevant: set[str]) -> tuple[float, float]:
    """(recall@1, recall@5) for a query with one concept: the first result, and any of the top five, relevant."""
    hits = [bool(relevant & set(group)) for group in ranked]
    return float(bool(hits[:1] and hits[0])), float(any(hits[:5]))


def metrics(ranked: list[list[str]], relevant: set[str]) -> tuple[float, float]:
    """(recall@5, nDCG@10); ``ranked`` is one list per result: the item and the near-duplicates folded into it."""
    hits = [bool(relevant & set(group)) * len(relevant & set(group)) for group in ranked]
    top5 = sum(hits[:5])
    recall = min(top5, 5) / min(5, len(relevant))
    dcg = sum(h / math.log2(i + 2) for i, h in enumerate(hits[:10]))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return recall, min(dcg / ideal, 1.0)


SIMILARITIES: dict[bool, list[float]] = {True: [], False: []}  # fused similarity of relevant / other results


async def run_query(services: Services, query: str, relevant: set[str] | None = None) -> list[list[str]]:
    body = await search_images(  # type: ignore[arg-type]
        services, None, query=query, maxPerBook=1000, limit=10, fold_duplicates=True
    )
    if relevant is not None:
        for item in body["items"]:
            SIMILARITIES[bool(relevant & {item["id"], *item["duplicates"]})].append(item["similarity"])
    return [[i["id"], *i["duplicates"]] for i in body["items"]]


def build(root: Path) -> Path:
    from tests.library import build_library

    return build_library(root)[1]


async def evaluate(
    data: Path, grid: bool, model: str = "e5", languages_file: Path = LANGUAGES, clean: bool = False
) -> dict[str, Any]:
    from imagesvc.settings import load_settings

    spec = json.loads(EVAL.read_text(encoding="utf-8"))
    out: dict[str, Any] = {}
    catalog = Catalog(data / "catalog.sqlite3")
    store = LocalStore(data / "store")
    try:
        ref_of = {}
        for row in catalog.query_all(
            "SELECT i.id, b.slug, i.page_number, i.idx FROM illustrations i JOIN books b ON b.id = i.book_id"
        ):
            ref_of[f"{row['slug']}:{row['page_number']}:{row['idx']}"] = row["id"]
        texts = {ref: illustration_text(r) for r in text_rows(catalog) for ref, iid in ref_of.items() if iid == r["id"]}
        out["paraphrase_overlaps"] = check_paraphrases(spec["queries"], texts)
        languages = json.loads(languages_file.read_text(encoding="utf-8"))
        out["language_overlaps"] = language_overlaps(languages, texts)
        # search_wait: every query waits for the text model, so no query is ranked while it is still loading
        base = {"data_dir": data, "site_url": "https://library.example", "session_secret": "eval", "search_wait": 600}
        services = {
            "keyword": Services(load_settings({}, **base, text_model="off"), catalog, store, b"eval"),
            "fused": Services(load_settings({}, **base, text_model=model), catalog, store, b"eval"),
        }
        await engine_for(services["fused"]).dense_ready()
        weights = [(fusion.W_FTS, fusion.DENSE_FLOOR, "sum")]
        if grid:
            weights += [(w, f, "sum") for w in (0.0, 0.1, 0.2, 0.3, 0.5) for f in (0.0, 0.15, 0.25, 0.35)]
        results: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
        default = weights[0]
        for q in spec["queries"]:
            relevant = {ref_of[r] for r in q["relevant"]}
            runs = {"keyword": await run_query(services["keyword"], q["query"])}
            for w, f, kind in dict.fromkeys([*weights, (0.0, fusion.DENSE_FLOOR, "dense")]):
                fusion.W_FTS, fusion.DENSE_FLOOR = w, f
                if kind == "dense":  # dense only: no keyword scores enter the fusion
                    runs["dense"] = await run_dense_only(services["fused"], q["query"])
                else:
                    runs[f"w={w} floor={f}"] = await run_query(services["fused"], q["query"])
            fusion.W_FTS, fusion.DENSE_FLOOR = default[0], default[1]
            runs["fused"] = await run_query(services["fused"], q["query"], relevant)

            if grid and q is spec["queries"][-1]:  # the cross-lingual set under each fusion constant, once
                for w, f, _kind in weights[1:]:
                    fusion.W_FTS, fusion.DENSE_FLOOR = w, f
                    for concept in languages["concepts"]:
                        rel = {ref_of[r] for r in concept["relevant"]}
                        for lang, text in concept["queries"].items():
                            hit = first_hit(await run_query(services["fused"], text), rel)
                            results[f"w={w} floor={f}"][f"xl-{lang}"].append(hit)
                fusion.W_FTS, fusion.DENSE_FLOOR = default[0], default[1]
            for mode, ranked in runs.items():
                m = metrics(ranked, relevant)
                results[mode][q["category"]].append(m)
                results[mode]["all"].append(m)
        by_language: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
        for concept in languages["concepts"]:
            relevant = {ref_of[r] for r in concept["relevant"]}
            for lang, query in concept["queries"].items():
                if clean and language_overlaps({"concepts": [{**concept, "queries": {lang: query}}]}, texts):
                    continue  # --clean: a query that shares a stem with its target is left out
                by_language["keyword"][lang].append(first_hit(await run_query(services["keyword"], query), relevant))
                by_language["dense"][lang].append(first_hit(await run_dense_only(services["fused"], query), relevant))
                by_language["fused"][lang].append(first_hit(await run_query(services["fused"], query), relevant))
        out["languages"] = {
            mode: {
                lang: [round(sum(v[i] for v in ms) / len(ms), 3) for i in (0, 1)] + [len(ms)]
                for lang, ms in langs.items()
            }
            for mode, langs in by_language.items()
        }
        out["model"] = engine_for(services["fused"]).text_model_state()
        out["modes"] = {
            mode: {
                cat: [round(sum(v[0] for v in ms) / len(ms), 3), round(sum(v[1] for v in ms) / len(ms), 3), len(ms)]
                for cat, ms in cats.items()
            }
            for mode, cats in results.items()
        }
    finally:
        catalog.close()
        await store.close()
    return out


async def run_dense_only(services: Services, query: str) -> list[list[str]]:
    """The fused path with the keyword scores left out (``fusion.fuse`` given none)."""
    import imagesvc.search.engine as engine_module

    real = engine_module.keyword_hits
    engine_module.keyword_hits = lambda catalog, text, limit=0: KeywordHits(np.zeros(0), ids=[])  # type: ignore[assignment]
    try:
        return await run_query(services, query)
    finally:
        engine_module.keyword_hits = real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="an ingested data dir (default: build the demo library)")
    parser.add_argument("--grid", action="store_true", help="also try other fusion weights and floors")
    parser.add_argument(
        "--model",
        default="e5+minilm",
        choices=["e5+minilm", "e5"],
        help="the text model (default e5+minilm)",
    )
    parser.add_argument(
        "--languages", type=Path, default=LANGUAGES, help="the cross-lingual set (default: the main one)"
    )
    parser.add_argument("--clean", action="store_true", help="leave out queries that share a stem with their target")
    parser.add_argument("--no-glosses", action="store_true", help="no dictionary glosses of Latin and Hebrew queries")
    parser.add_argument(
        "--prefilter",
        type=int,
        metavar="N",
        help="score as a large index is scored (each illustration's mean passage first), keeping N candidates: the "
        "prefilter's effect on relevance, which the demo's 38 illustrations never reach otherwise",
    )
    args = parser.parse_args()
    if args.prefilter:
        from imagesvc.search import dense

        dense.PREFILTER_FROM, dense.CANDIDATES = 1, args.prefilter
    if args.no_glosses:
        from imagesvc.search import glosses

        glosses._shared = glosses.Glossary(())  # the process's glossary, with no language to gloss
    with tempfile.TemporaryDirectory(prefix="search-eval-") as tmp:
        data = args.data or build(Path(tmp))
        out = asyncio.run(evaluate(data, args.grid, args.model, args.languages, args.clean))
    print(f"text model: {out['model']}")
    for key, what in (("paraphrase_overlaps", "paraphrase"), ("language_overlaps", "cross-lingual")):
        if out[key]:
            print(f"{what} queries sharing a stem with their target (fix the eval set):", *out[key], sep="\n  ")
    langs = list(json.loads(args.languages.read_text(encoding="utf-8"))["languages"])
    print(f"{'cross-lingual R@1 R@5':<24}" + "".join(f"{c:>12}" for c in langs))
    for mode in MODES:
        row = out["languages"][mode]
        print(f"{mode:<24}" + "".join(f"{row[c][0]:>6.2f}{row[c][1]:>6.2f}" for c in langs))
    cats = ["paraphrase", "related-wording", "misspelling", "two-concept", "latin-german", "keyword", "negative", "all"]
    print(f"{'mode':<24}" + "".join(f"{c:>18}" for c in cats))
    print(f"{'':<24}" + "".join(f"{'R@5 nDCG@10':>18}" for _ in cats))
    for mode in ["keyword", "dense", "fused", *[m for m in out["modes"] if m.startswith("w=")]]:
        row = out["modes"].get(mode)
        if row is None:
            continue
        cells = "".join(f"{row[c][0]:>9.2f}{row[c][1]:>9.2f}" if c in row else f"{'-':>18}" for c in cats)
        print(f"{mode:<24}{cells}")
    grid_rows = [m for m in out["modes"] if m.startswith("w=")]
    if any("xl-en" in out["modes"][m] for m in grid_rows):
        print(f"{'cross-lingual fused R@5':<24}" + "".join(f"{c:>6}" for c in langs) + "   mean    min")
        for mode in grid_rows:
            r5 = [out["modes"][mode][f"xl-{c}"][1] for c in langs]
            cells = "".join(f"{v:>6.2f}" for v in r5)
            print(f"{mode:<24}{cells}{sum(r5) / len(r5):>7.3f}{min(r5):>7.2f}")
    for label, key in (("relevant", True), ("other", False)):
        values = sorted(SIMILARITIES[key])
        if values:
            quartiles = [values[int(f * (len(values) - 1))] for f in (0.1, 0.25, 0.5, 0.75, 0.9)]
            print(f"fused similarity of {label} results (10/25/50/75/90%): " + " ".join(f"{v:.2f}" for v in quartiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
