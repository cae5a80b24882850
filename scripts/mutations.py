#!/usr/bin/env python3
"""Mutation check: break one rule of the house at a time and see that the suite notices.

Each mutation is an exact source text replacement in a temporary copy of the tree. The script asserts that the text
it replaces occurs exactly once (a refactor that moved or changed a rule line is reported by name, never passed
silently), runs the named tests against the mutated copy and reports the mutation ``killed`` (a test failed) or
``SURVIVED`` (every test passed: the rule is not guarded). It first runs the same tests unmutated, so that a kill means
the mutation, not a test that already fails.

    .venv/bin/python scripts/mutations.py                # every mutation
    .venv/bin/python scripts/mutations.py iiif-unmetered # some, by name
    .venv/bin/python scripts/mutations.py --list
    .venv/bin/python scripts/mutations.py --prefix match- --no-baseline  # search by image's rules

Exit status: 0 when every mutation was killed, 1 when one survived, 2 when a replacement no longer applies or the
unmutated tests fail. Run by a person or by CI on demand; ``make test`` does not run it (it takes minutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = (
    "imagesvc",
    "tests",
    "fixtures",
    "colophon",
    "pyproject.toml",
    "README.md",
    "docs",
    "scripts",
    "benchmarks",
    "Makefile",
)
LINKED = ("viewer",)  # installed assets (hundreds of MB), read only: linked, not copied


@dataclass(frozen=True)
class Mutation:
    name: str
    rule: str  # the promise the mutation breaks
    path: str  # relative to the repository root
    old: str  # exact text, found exactly once
    new: str
    tests: tuple[str, ...]  # pytest node ids or files, relative to the root


MUTATIONS = [
    Mutation(
        "iiif-unmetered",
        "an IIIF image is priced and reserved in the image budget before any pixel work",
        "imagesvc/web/iiif.py",
        '    await call.meter.reserve_milli("images", price_milli(width, height, services.settings.display_size))\n',
        "    pass\n",
        (
            "tests/http/test_iiif.py::test_budget_is_charged_by_delivered_area_and_304_is_free",
            "tests/http/test_iiif.py::test_a_spent_pool_refuses_every_priced_output",
        ),
    ),
    Mutation(
        "stored-run-by-key-only",
        "a stored object's hashed segments are kept per object key and content (ETag), never by key alone",
        "imagesvc/tools/image_delivery.py",
        "    stored_key = (stored.info.key, stored.info.etag, len(data))\n",
        "    stored_key = (stored.info.key,)\n",
        ("tests/http/test_image_c2pa.py::test_an_object_rewritten_in_place_is_signed_over_its_new_bytes",),
    ),
    Mutation(
        "box-hash-skips-trailing-bytes",
        "a file c2pa's box map would not cover exactly (bytes after the end of image) is signed with a data hash",
        "imagesvc/provenance/box_hashed.py",
        '            return [*names, "EOI"] if pos + 2 == size else None\n',
        '            return [*names, "EOI"]\n',
        ("tests/imaging/test_c2pa.py::test_every_byte_outside_the_manifest_is_bound",),
    ),
    Mutation(
        "strict-accepts-unknown",
        "a route that declares no parameters refuses any query parameter (params.strict)",
        "imagesvc/web/params.py",
        "        for key in request.query:\n            raise unknown_name(route_name(request), key, NONE)\n",
        "        for key in ():\n            raise unknown_name(route_name(request), key, NONE)\n",
        ("tests/conformance/test_parameters.py::test_an_unknown_parameter_on_every_route_is_a_400_naming_it",),
    ),
    Mutation(
        "declared-accepts-unknown",
        "a route that declares its parameters refuses one it does not declare",
        "imagesvc/web/params.py",
        "        if key not in names or names[key] in skipped:\n",
        "        if key not in names:\n            continue\n        if names[key] in skipped:\n",
        ("tests/conformance/test_parameters.py::test_an_unknown_parameter_on_every_route_is_a_400_naming_it",),
    ),
    Mutation(
        "clean-for-free-key",
        "clean=1 (no visible mark) needs a full or enterprise key",
        "imagesvc/tools/image_delivery.py",
        "    if not allowance.clean_allowed:\n",
        "    if False:\n",
        (
            "tests/http/test_image.py::test_clean_is_refused_for_every_tier_below_full",
            "tests/http/test_iiif.py::test_no_iiif_form_yields_clean_pixels_without_a_full_key",
        ),
    ),
    Mutation(
        "mcp-batch-unlimited",
        "every tool call in an MCP batch counts against the request limit",
        "imagesvc/web/mcp_tools.py",
        "        if self.denied is not None or self.calls == 1:",
        "        if True:",
        ("tests/http/test_mcp.py::test_each_call_in_a_batch_counts_against_the_request_limit",),
    ),
    Mutation(
        "rest-request-limit-skipped",
        "every REST request counts against the caller's request limit",
        "imagesvc/web/access.py",
        "    hit = await app[ACCESS].hit(caller.subject, limit, allowance.request_window)\n",
        "    hit = await app[ACCESS].hit(caller.subject, None, allowance.request_window)\n",
        ("tests/http/test_access.py::test_forwarded_for_is_ignored_from_untrusted_peers",),
    ),
    Mutation(
        "tool-accepts-unknown-argument",
        "a tool call naming an argument the tool does not take is refused, naming it and the closest",
        "imagesvc/surface/arguments.py",
        '    if schema.get("additionalProperties") is False:\n        for name in arguments:\n',
        "    if False:\n        for name in arguments:\n",
        (
            "tests/surface/test_arguments.py",
            "tests/http/test_mcp.py::test_bad_arguments_are_tool_errors_the_model_can_act_on",
        ),
    ),
    Mutation(
        "head-skips-budget-check",
        "HEAD of a priced output answers as GET would: a 429 from a spent pool",
        "imagesvc/access/meter.py",
        "            return await self._check(pool, milli, allow_partial)\n",
        "            return milli\n",
        (
            "tests/access/test_request_meter.py",
            "tests/http/test_iiif.py::test_a_spent_pool_refuses_every_priced_output",
        ),
    ),
    Mutation(
        "head-spends-budget",
        "HEAD delivers nothing, so it spends nothing",
        "imagesvc/web/access.py",
        'delivers=request.method != "HEAD"',
        "delivers=True",
        (
            "tests/http/test_image.py::test_head_and_repeat_deliveries",
            "tests/http/test_iiif.py::test_iiif_deliveries_are_in_the_usage_meter",
        ),
    ),
    Mutation(
        "settle-refunds-deliveries",
        "a delivered reservation is committed (counted), not refunded",
        "imagesvc/access/meter.py",
        "                await self.access.commit(reservation)\n",
        "                await self.access.refund(reservation)\n",
        ("tests/access/test_request_meter.py",),
    ),
    Mutation(
        "uncapped-without-store",
        "an uncapped delivery needs the access store to answer (nothing metered goes out blind)",
        "imagesvc/access/meter.py",
        "            await self._ensure_alive()\n",
        "",
        ("tests/access/test_request_meter.py",),
    ),
    Mutation(
        "lying-jpeg-accepted",
        "a JPEG whose scan data cannot fill the size its header declares is refused at ingest",
        "imagesvc/imaging/integrity.py",
        "    if sof in _JPEG_HUFFMAN_SOF and entropy * 8 < blocks:\n",
        "    if False:\n",
        ("tests/imaging/test_hostile_masters.py", "tests/ingest/test_hostile_ingest.py"),
    ),
    Mutation(
        "keyed-image-unsigned",
        "a keyed /image delivery carries a C2PA manifest signed after its note",
        "imagesvc/tools/image_delivery.py",
        "    if delivery.credentials is None:",
        "    if True:",
        ("tests/http/test_image_c2pa.py",),
    ),
    Mutation(
        "charged-when-handed-over",
        "a unit is committed once the client acknowledged its last byte, not when it was handed to the socket",
        "imagesvc/web/wire.py",
        "            return _acked(self._sock) + queued + buffered\n",
        "            return 0\n",
        (
            "tests/http/test_delivery_metering.py::test_a_reader_that_stops_after_the_head_pays_for_nothing_and_is_cut_off",
        ),
    ),
    Mutation(
        "reservations-not-renewed",
        "a delivery still being written renews its reservations, so a commit after a long stall counts",
        "imagesvc/web/access.py",
        "renew_every=settings.reservation_ttl / 3)",
        "renew_every=1e9)",
        (
            "tests/http/test_delivery_metering.py::test_a_delivery_read_after_stalls_longer_than_a_reservation_lives_is_charged_in_full",
        ),
    ),
    Mutation(
        "within-book-repeats-counted",
        "a word or phrase repeated in a search inside a book is looked for once",
        "imagesvc/catalog/page_rank.py",
        "    words = list(dict.fromkeys(words))  # a word or phrase asked twice is looked for once\n",
        "    words = list(words)\n",
        ("tests/catalog/test_page_search_cost.py::test_a_repeated_phrase_costs_what_it_costs_once",),
    ),
    Mutation(
        "within-book-free-when-empty",
        "a search inside a book costs a text unit, held before any work, whatever it finds",
        "imagesvc/tools/within_book.py",
        "        await call.meter.reserve(TEXT_POOL, 1)",
        "        pass",
        ("tests/http/test_within_book_cost.py::test_with_the_text_pool_spent_no_door_starts_a_search",),
    ),
    Mutation(
        "within-book-unbounded-caller",
        "one caller has at most IMAGESVC_WITHIN_BOOK_PER_CALLER searches inside books at once",
        "imagesvc/tools/page_search_work.py",
        "        if self._callers[caller] >= self.per_caller:",
        "        if False:",
        ("tests/http/test_within_book_cost.py",),
    ),
    Mutation(
        "url-text-unchecked",
        "a path segment or query value holding NUL is a 400 naming it, on every route (params.text_only)",
        "imagesvc/web/params.py",
        "            refuse_not_text(where, name, value)\n",
        "            pass\n",
        ("tests/http/test_any_string.py::test_nul_is_a_400_naming_the_parameter_at_every_door[sqlite]",),
    ),
    Mutation(
        "withdraw-leaves-public",
        "a withdrawn book's public tiers leave pub/, so no node's /img/ serves them",
        "imagesvc/ingest/withdrawal.py",
        "    moved, missing = await _move_all(store, [(key, WITHDRAWN_PREFIX + key) for key in keys])\n",
        "    moved, missing = len(keys), 0\n",
        ("tests/test_withdraw.py::test_a_withdrawn_book_is_gone_from_every_node_and_comes_back_whole",),
    ),
    # --- query glosses: each constant and rule kept in imagesvc/search/{glosses,dictionaries,lemmas}.py -------------
    Mutation(
        "gloss-sense-parts",
        "a Hebrew gloss keeps two parts of a headword's first sense (SENSE_PARTS)",
        "imagesvc/search/dictionaries.py",
        "SENSE_PARTS = 2  #",
        "SENSE_PARTS = 3  #",
        ("tests/search/test_glosses.py::test_a_sense_keeps_the_first_words_of_its_entry",),
    ),
    Mutation(
        "gloss-latin-sense-parts",
        "a Latin gloss keeps one word of a headword's sense (LATIN_SENSE_PARTS)",
        "imagesvc/search/dictionaries.py",
        "LATIN_SENSE_PARTS = 1  #",
        "LATIN_SENSE_PARTS = 2  #",
        ("tests/search/test_glosses.py::test_a_sense_keeps_the_first_words_of_its_entry",),
    ),
    Mutation(
        "gloss-italian-sense-parts",
        "an Italian gloss keeps the one English word most of a lemma's synsets share (ITALIAN_SENSE_PARTS)",
        "imagesvc/search/dictionaries.py",
        "ITALIAN_SENSE_PARTS = 1  #",
        "ITALIAN_SENSE_PARTS = 2  #",
        ("tests/search/test_glosses.py::test_a_sense_keeps_the_first_words_of_its_entry",),
    ),
    Mutation(
        "gloss-longest-word-low",
        "a word up to LONGEST_WORD letters is lemmatised (long real words are read)",
        "imagesvc/search/lemmas.py",
        "LONGEST_WORD = 40  #",
        "LONGEST_WORD = 30  #",
        ("tests/search/test_lemmas.py::test_long_real_words_are_read",),
    ),
    Mutation(
        "gloss-longest-word-high",
        "a word longer than LONGEST_WORD letters never reaches simplemma (bounded work per word)",
        "imagesvc/search/lemmas.py",
        "LONGEST_WORD = 40  #",
        "LONGEST_WORD = 400  #",
        ("tests/search/test_gloss_attacks.py::test_a_long_word_is_never_given_to_simplemma",),
    ),
    Mutation(
        "gloss-most-words",
        "a query's first MOST_WORDS words are glossed, no more",
        "imagesvc/search/glosses.py",
        "MOST_WORDS = 32  #",
        "MOST_WORDS = 33  #",
        (
            "tests/search/test_glosses.py::test_a_long_query_costs_little",
            "tests/search/test_glosses.py::test_a_long_arabic_query_is_read_in_bounded_work",
        ),
    ),
    Mutation(
        "gloss-no-comparative",
        "a Latin comparative is looked up as its positive (simplemma's lemma is the comparative)",
        "imagesvc/search/glosses.py",
        '        return forms + [f[: -len("ior")] + "us" for f in forms if f.endswith("ior") and len(f) > 5]\n',
        "        return forms\n",
        ("tests/search/test_glosses.py::test_a_latin_comparative_is_read_as_its_positive",),
    ),
    Mutation(
        "gloss-no-hebrew-vowel-letters",
        "a plain Hebrew word is also looked up without its vowel letters (pointed headwords)",
        "imagesvc/search/glosses.py",
        "        bare = [_bare(f) for f in forms if len(f) > 3]\n",
        "        bare: list[str] = []\n",
        ("tests/search/test_glosses.py::test_a_hebrew_word_in_plain_spelling_finds_its_pointed_headword",),
    ),
    Mutation(
        "gloss-no-arabic-fallback",
        "an Arabic word simplemma has no lemma of is looked up without the article and a feminine or possessive ending",
        "imagesvc/search/glosses.py",
        "            forms += [bare, *(bare.removesuffix(ending) for ending in _ARABIC_ENDINGS)]\n",
        "            pass\n",
        ("tests/search/test_glosses.py::test_arabic_words_with_prefixes_and_suffixes",),
    ),
    Mutation(
        "gloss-no-arabic-article-first",
        "an Arabic form is looked up with the article first: a noun before the verb spelt alike",
        "imagesvc/search/glosses.py",
        "        return [k for f in forms for k in ((f,) if f.startswith(_ARTICLE) else (_ARTICLE + f, f))]\n",
        "        return [k for f in forms for k in ((f,) if f.startswith(_ARTICLE) else (f, _ARTICLE + f))]\n",
        ("tests/search/test_glosses.py::test_an_arabic_noun_is_read_before_the_verb_spelt_alike",),
    ),
    Mutation(
        "gloss-two-thirds",
        "a query in Latin letters is Latin or Italian only if two thirds of its words are the language's",
        "imagesvc/search/glosses.py",
        "    if len(own) * 3 < len(words) * 2 or len(own) <= len(english):\n",
        "    if len(own) * 3 < len(words) * 1 or len(own) <= len(english):\n",
        (
            "tests/search/test_glosses.py::test_french_spanish_and_german_queries_are_not_glossed",
            "tests/search/test_glosses.py::test_queries_in_other_languages_are_not_glossed",
        ),
    ),
    Mutation(
        "gloss-english-share",
        "a query reads as English only if ENGLISH_SHARE of its words are in the English word list",
        "imagesvc/search/glosses.py",
        "ENGLISH_SHARE = (2, 3)  #",
        "ENGLISH_SHARE = (1, 2)  #",
        ("tests/search/test_english_queries.py",),
    ),
    Mutation(
        "gloss-common-english",
        "a query reads as English only with a common English word (COMMON_ENGLISH occurrences) or function word",
        "imagesvc/search/glosses.py",
        "COMMON_ENGLISH = 1000  #",
        "COMMON_ENGLISH = 10  #",
        ("tests/search/test_english_queries.py",),
    ),
]

# Search by image's rules: each field of ``MatchParams`` moved one way, held by the seeded evaluation. A move is
# toward the side where the rule binds on the evaluation's library (a list made shorter, a floor raised), as far as
# a value someone might try. Named ``match-<field>``; ``--prefix match-`` runs them all.
IMAGE_EVALUATION = ("tests/search/test_image_evaluation.py",)
MATCH_MOVES = (  # (field and type, value, moved to)
    ("query_keypoints: int", "1500", "1000"),
    ("coarser_levels: tuple[int, ...]", "(2, 4)", "(2,)"),
    ("min_coarser: int", "200", "800"),
    ("same_place_px: float", "3.0", "1.0"),
    ("k_per: int", "40", "20"),
    ("max_hamming: int", "60", "50"),
    ("sigma: float", "24.0", "12.0"),
    ("turns: int", "16", "8"),
    ("window: int", "3", "1"),
    ("preselect: int", "4000", "1000"),
    ("candidates: int", "400", "100"),
    ("by_pairs: int", "100", "25"),
    ("by_place: int", "100", "25"),
    ("place_px: int", "48", "96"),
    ("min_pairs: int", "6", "10"),
    ("ransac_px: float", "8.0", "4.0"),
    ("tight_px: float", "2.5", "1.5"),
    ("same_block_inliers: int", "12", "20"),
    ("same_block_ratio: float", "0.2", "0.4"),
    ("same_block_cells: int", "2", "4"),
    ("confirm_agree: float", "0.5", "0.7"),
    ("confirm_stretch: float", "1.15", "1.05"),
    ("guided_candidates: int", "20", "5"),
    ("guided_px: float", "6.0", "3.0"),
    ("guided_hamming: int", "64", "48"),
    ("guided_rounds: int", "2", "1"),
    ("guided_grid: int", "8", "4"),
    ("guided_pairs: int", "20", "30"),
    ("guided_cells: int", "12", "16"),
    ("guided_stretch: float", "1.05", "1.02"),
    ("guided_fewer_cells: int", "10", "12"),
    ("guided_strong: int", "15", "25"),
    ("strong_hamming: int", "32", "24"),
    ("near_pairs: int", "15", "25"),
    ("near_cells: int", "7", "10"),
    ("sibling_pairs: int", "60", "120"),
    ("sibling_cells: int", "20", "40"),
    ("close_pairs: int", "12", "18"),
    ("close_cells: int", "5", "8"),
    ("close_stretch: float", "1.15", "1.05"),
    ("close_strong: float", "0.3", "0.6"),
    ("corroborate_from: int", "1", "0"),
    ("expand_from: int", "1", "0"),
    ("expand_candidates: int", "50", "10"),
    ("expand_checked: int", "5", "1"),
    ("guided_agree: float", "0.4", "0.6"),
)
MUTATIONS += [
    Mutation(
        f"match-{decl.split(':')[0].replace('_', '-')}",
        f"search by image answers as committed with {decl.split(':')[0]} at {old}, not {new}",
        "imagesvc/search/match_params.py",
        f"    {decl} = {old}",
        f"    {decl} = {new}",
        IMAGE_EVALUATION,
    )
    for decl, old, new in MATCH_MOVES
]


def copy_tree(target: Path) -> None:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", ".*cache"))
        elif source.exists():
            shutil.copy2(source, target / name)
    for name in LINKED:
        if (ROOT / name).exists():
            (target / name).symlink_to(ROOT / name)


def first_failure(output: str) -> str:
    """The name of the first test pytest's summary reports failed (or ``output``'s last line when none)."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split()[1].rsplit("::", 1)[-1]
    return (output.strip().splitlines() or [""])[-1][:60]


def pytest(tree: Path, tests: tuple[str, ...], timeout: int) -> tuple[bool, str]:
    """Run ``tests`` against ``tree``'s code; (passed, the output's tail)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESVC_")}
    env["PYTHONPATH"] = str(tree)  # ahead of the worktree's .pth entry: the copy's imagesvc and tests are imported
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout} s"
    return done.returncode == 0, (done.stdout + done.stderr)[-3000:]


def check_imports_copy(tree: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(tree)}
    where = subprocess.run(
        [sys.executable, "-c", "import imagesvc, tests; print(imagesvc.__file__, tests.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not all(Path(p).is_relative_to(tree) for p in where):
        raise SystemExit(f"the copy's code is not what runs ({where}): check PYTHONPATH and the venv's .pth files")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--prefix", default="", help="run the mutations whose names start with this")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per pytest run (default 600)")
    args = parser.parse_args()
    known = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:30} {m.path}: {m.rule}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; valid: {', '.join(known)}")
    chosen = [known[n] for n in args.names] if args.names else MUTATIONS
    chosen = [m for m in chosen if m.name.startswith(args.prefix)]

    stale = []
    for m in chosen:
        found = (ROOT / m.path).read_text(encoding="utf-8").count(m.old) if (ROOT / m.path).exists() else 0
        if found != 1:
            stale.append(f"{m.name}: the text to replace occurs {found} times in {m.path} (expected once):\n{m.old}")
    if stale:
        print("Mutation targets no longer apply; update MUTATIONS in scripts/mutations.py:\n", file=sys.stderr)
        print("\n".join(stale), file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="imagesvc-mutations-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        check_imports_copy(tree)
        if not args.no_baseline:
            union = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
            started = time.monotonic()
            passed, tail = pytest(tree, union, args.timeout * 2)
            print(f"baseline: {len(union)} test targets unmutated, {time.monotonic() - started:.0f} s", flush=True)
            if not passed:
                print(f"The unmutated tests fail, so no kill would mean anything:\n{tail}", file=sys.stderr)
                return 2
        rows = []
        for m in chosen:
            target = tree / m.path
            original = target.read_text(encoding="utf-8")
            target.write_text(original.replace(m.old, m.new), encoding="utf-8")
            started = time.monotonic()
            try:
                passed, tail = pytest(tree, m.tests, args.timeout)
            finally:
                target.write_text(original, encoding="utf-8")
            by = "" if passed else first_failure(tail)
            rows.append((m.name, len(m.tests), "SURVIVED" if passed else "killed", time.monotonic() - started, by))
            print(f"  {m.name}: {rows[-1][2]} ({rows[-1][3]:.0f} s) {by}", flush=True)

    killed = sum(r[2] == "killed" for r in rows)
    print(f"\n{killed} of {len(rows)} mutations killed ({killed / max(1, len(rows)):.0%})")
    print("\n| mutation | test targets run | result | seconds | first failing test |")
    print("|---|---|---|---|---|")
    for name, count, result, seconds, by in rows:
        print(f"| {name} | {count} | {result} | {seconds:.0f} | {by} |")
    survivors = [r[0] for r in rows if r[2] == "SURVIVED"]
    if survivors:
        print(f"\n{len(survivors)} mutation(s) survived: {', '.join(survivors)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
