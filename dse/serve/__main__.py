"""`python -m dse.serve DIR [inputs=FOLDER out=FOLDER] [http=HOST:PORT] [key=value ...]`: serve a
deployment.

``DIR`` is a deployment (``python -m dse.deploy`` writes one). With ``inputs=FOLDER``: every
image, ``.npy`` and ``.npz`` of the folder served once, each one's outputs to
``out=FOLDER/NAME.npz`` (:mod:`dse.serve.batch`), then a report; exit 0 when every input was
served, 2 when some could not be read (each named; the others are served). Without it: the
inference endpoint (:func:`dse.serve.http.serve_forever`) at ``http=HOST:PORT`` until Ctrl-C or
SIGTERM. A wrong word is one line naming it and the keys this takes, exit 2.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the heavy imports: a signal now ends the process cleanly
    from dse.cli import stop_early_on_signals

    stop_early_on_signals()

import math
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.cli import fail, stopped_cleanly
from dse.errors import DseError
from dse.serve.deployment import IN_FLIGHT
from dse.serve.http import HOST, MAX_BODY_MB, PORT
from dse.serve.images import Preprocess

#: The endpoint's address without http=.
HTTP = (HOST, PORT)


def _path(text: str) -> Path:
    if not text:
        raise ValueError("an empty path")
    return Path(text).expanduser()


def _count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise ValueError("less than 1")
    return n


def _number(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError("not finite")
    return x


def _positive(text: str) -> float:
    x = _number(text)
    if x <= 0:
        raise ValueError("not positive")
    return x


def _numbers(text: str) -> tuple[float, ...]:
    return tuple(_number(v) for v in text.split(","))


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:8000
    if not sep or not host or not 0 <= int(port) <= 65535:
        raise ValueError("not HOST:PORT")
    return host, int(port)


@dataclass(frozen=True)
class Key:
    """One key=value word: its value's form, how it is read, and what it means."""

    form: str
    read: Callable[[str], Any]
    means: str


#: The keys this takes, in the order the usage gives them.
KEYS = {
    "inputs": Key("FOLDER", _path, "serve every image, .npy and .npz of FOLDER once (a batch)"),
    "out": Key("FOLDER", _path, "a batch's outputs, NAME.npz per input (needed with inputs=)"),
    "http": Key(
        "HOST:PORT", _address, f"without inputs=, the endpoint's address ({HTTP[0]}:{HTTP[1]})"
    ),
    "platform": Key("NAME", str, "run on this platform's hosts (default: the deployment's own)"),
    "in_flight": Key("N", _count, f"requests in the pipeline at once ({IN_FLIGHT})"),
    "scale": Key("X", _number, "a batch's images: pixel (0..255) x scale (1/255), then ..."),
    "mean": Key("A,B,C", _numbers, "... minus mean, per channel (ImageNet's: 0.485,0.456,0.406)"),
    "std": Key("A,B,C", _numbers, "... over std, per channel (ImageNet's: 0.229,0.224,0.225)"),
    "max_body_mb": Key(
        "N", _positive, f"the endpoint's largest request body, MB ({MAX_BODY_MB:g})"
    ),
}
#: The keys of a batch only, and of the endpoint only.
BATCH_ONLY = ("out", "scale", "mean", "std")
HTTP_ONLY = ("http", "max_body_mb")
USAGE = (
    "python -m dse.serve DIR [inputs=FOLDER out=FOLDER] [http=HOST:PORT] [platform=NAME] "
    "[in_flight=N] [scale=X] [mean=A,B,C] [std=A,B,C] [max_body_mb=N]"
)


def help_page() -> str:
    """What ``--help`` prints: the usage, what it does, its keys with their defaults and its
    page of the manual."""
    from dse.usage import described, manual

    lines = [f"usage: {USAGE}", "", described("serve"), ""]
    lines.append("Keys (key=value; the defaults in parentheses):")
    width = max(len(f"{k}={v.form}") for k, v in KEYS.items())
    lines += [f"  {f'{k}={v.form}':<{width}}  {v.means}" for k, v in KEYS.items()]
    lines += [
        "",
        *textwrap.wrap(
            "Exit status: 0 done; 2 a user error, or a batch with inputs it could not read (each "
            "named, the others served); 130 stopped (Ctrl-C, SIGTERM).",
            100,
        ),
        "Every command: python -m dse --help",
        manual(_page()),
    ]
    return "\n".join(lines)


def _page() -> str:
    from dse.usage import HELP

    return HELP["serve"].page


def parse(argv: Sequence[str]) -> tuple[Path, dict[str, Any]]:
    """The deployment's directory and the keys given (a later word wins), or one line naming
    the word that is wrong and the keys this takes."""
    takes = " ".join(f"{k}=" for k in KEYS)
    words = list(argv)
    if not words or words[0].partition("=")[0] in KEYS:
        raise DseError(f"which deployment? python -m dse.serve DIR [key=value ...] ({takes})")
    directory, given = Path(words[0]).expanduser(), {}
    for word in words[1:]:
        key, sep, text = word.partition("=")
        if not sep or key not in KEYS:
            raise DseError(f"unknown word {word!r}: python -m dse.serve DIR takes {takes}")
        try:
            given[key] = KEYS[key].read(text)
        except ValueError:
            raise DseError(f"{key}={text}: give {key}={KEYS[key].form}") from None
    batch = "inputs" in given
    wrong = [k for k in (HTTP_ONLY if batch else BATCH_ONLY) if k in given]
    if wrong:
        mode = "a batch (inputs=) takes no" if batch else "without inputs=, the endpoint takes no"
        raise DseError(f"{mode} {wrong[0]}=: drop it" + ("" if batch else " or add inputs="))
    if batch and "out" not in given:
        raise DseError("where do the outputs go? add out=FOLDER to inputs=")
    return directory, given


def main(argv: Sequence[str]) -> int:
    """Run ``python -m dse.serve`` with the words ``argv``; its exit status."""
    if "--help" in argv or "-h" in argv:
        print(help_page())
        return 0
    try:
        directory, given = parse(argv)
        preprocess = Preprocess(**{k: given[k] for k in ("scale", "mean", "std") if k in given})
        if "inputs" in given:  # the folder's problems before the ranks start
            from dse.serve.batch import batch_inputs

            batch_inputs(given["inputs"], given["out"])
        from dse.serve import Deployment

        in_flight = given.get("in_flight", IN_FLIGHT)
        with Deployment.start(
            directory, platform=given.get("platform"), in_flight=in_flight
        ) as deployment:
            if "inputs" not in given:
                from dse.serve.http import serve_forever

                host, port = given.get("http", HTTP)
                serve_forever(deployment, host, port, given.get("max_body_mb", MAX_BODY_MB))
                return 0
            from dse.serve.batch import serve_folder

            report = serve_folder(deployment, given["inputs"], given["out"], preprocess, in_flight)
    except DseError as exc:
        fail(str(exc))
    print("\n".join(report.lines()), flush=True)
    if report.failed:
        n = report.served + len(report.failed)
        fail(f"{len(report.failed)} of {n} inputs could not be read (each named above)")
    return 0


if __name__ == "__main__":
    sys.exit(stopped_cleanly(lambda: main(sys.argv[1:])))
