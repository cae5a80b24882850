"""What each step of search by image's cascade earns: the seeded evaluation (``fixtures/woodcut_evaluation.py``,
2,000 illustrations) answered with all steps, then with each step off, recall and precision per kind of query and
the answers that moved.

Usage: python3 benchmarks/image_steps.py [--cache DIR] [--steps confirm,clean,...] [--workers 2]

Steps: ``by_pairs`` and ``by_place`` (the candidate lists beside the vote), ``confirm`` (several same_block
candidates held to the best's fit), ``clean`` (held to the best's block by how cleanly they fit), ``guided`` (a
small crop matched again by position), ``siblings`` (two near fits that are printings of one block),
``corroborate`` (a close fit corroborated through a printing's own search), ``expand`` (the best found searched
whole). A step is switched off by its parameter where it has one, else by a subclass that skips it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures import woodcut_evaluation as ev
from imagesvc.search import printings
from imagesvc.search.match_params import DEFAULT

OFF_BY_PARAMS = {
    "by_pairs": {"by_pairs": 0},
    "by_place": {"by_place": 0},
    "corroborate": {"corroborate_from": 0},
    "expand": {"expand_from": 0},
}
SKIPPED = {  # steps with no parameter of their own: the method that runs them, and what it answers when skipped
    "confirm": ("_confirmed", lambda self, found: found),
    "clean": ("_clean_as_the_block", lambda self, held, best: [c for c, _f in held]),
    "guided": ("_guided", lambda self, considered: []),
    "siblings": ("_siblings", lambda self, near: []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / f"imagesvc-woodcut-eval-{os.getuid()}"
    )
    parser.add_argument("--steps", default=",".join([*OFF_BY_PARAMS, *SKIPPED]))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"machine load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    t = time.process_time()
    queries, base = ev.evaluate(DEFAULT, args.cache, args.workers)
    print(f"all steps ({time.process_time() - t:.0f} s CPU)\n{ev.table(ev.scores(queries, base))}\n", flush=True)
    for step in args.steps.split(","):
        params, saved = DEFAULT, None
        if step in OFF_BY_PARAMS:
            params = replace(DEFAULT, **OFF_BY_PARAMS[step])
        else:
            name, skip = SKIPPED[step]
            saved = getattr(printings.PrintingSearch, name)
            setattr(printings.PrintingSearch, name, skip)  # this benchmark's process only
        try:
            t = time.process_time()
            _, answers = ev.evaluate(params, args.cache, args.workers)
        finally:
            if saved is not None:
                setattr(printings.PrintingSearch, SKIPPED[step][0], saved)
        moved = [q.key for q in queries if answers[q.key].same_block != base[q.key].same_block]
        rows = ev.scores(queries, answers)
        print(f"without {step} ({time.process_time() - t:.0f} s CPU): {len(moved)} answers moved {moved[:6]}")
        print(ev.table(rows) + "\n", flush=True)


if __name__ == "__main__":
    main()
