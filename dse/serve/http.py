"""An inference endpoint for applications in any language: a started
:class:`~dse.serve.Deployment` served over HTTP/REST with the Open Inference Protocol (KServe's
"V2 inference protocol"), and Triton's binary tensor data extension, so that Triton's clients
(``tritonclient.http``) work with their defaults.

Routes (``NAME`` is the deployment's :attr:`~dse.serve.Deployment.name`; each ``models/NAME``
route also answers as ``models/NAME/versions/1``):

* ``GET /v2``: the server's metadata (``name``, ``version``, ``extensions``);
* ``GET /v2/health/live``: 200 while the endpoint runs;
* ``GET /v2/health/ready``, ``GET /v2/models/NAME/ready``: 200 while the deployment is alive,
  else 503 with the reason it stopped;
* ``GET /v2/models/NAME``: the model's metadata (its inputs and outputs: name, datatype, shape);
* ``POST /v2/models/NAME/infer``: one inference.

An inference request is a JSON object whose ``inputs`` each give ``name``, ``shape``,
``datatype`` (:data:`DATATYPES`) and either ``data`` (the values, flat in row-major order or
nested) or, with the binary extension, ``parameters.binary_data_size``: that many bytes of the
tensor (little-endian, row-major) after the JSON object, whose length the
``Inference-Header-Content-Length`` header gives. The response carries every output of the
model, or those the request's ``outputs`` names, each as JSON ``data`` or as binary data after
the JSON (the output's ``parameters.binary_data``, else the request's
``parameters.binary_data_output``, else JSON); it echoes the request's ``id``.

Errors are JSON objects ``{"error": "one line"}``: 400 for a request the model cannot take
(malformed, or a wrong name, shape or datatype: the deployment goes on serving), 404 for another
model or an unknown route, 413 for a body over the limit, 503 once the deployment has failed.
Request bodies are read as JSON and raw little-endian numbers only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import json
import math
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

import numpy as np
from aiohttp import web

from dse.errors import DseError
from dse.serve import Deployment, RequestError, ServeError

#: The protocol's tensor datatypes this endpoint carries, and their numpy dtypes (BYTES and BF16
#: have none: no deployed CNN takes strings or bfloat16).
DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_DATATYPE_OF = {dtype: name for name, dtype in DATATYPES.items()}
#: JSON values a datatype's ``data`` may hold, as the numpy kinds of the parsed values
_JSON_KINDS = {"b": "b", "u": "iu", "i": "iu", "f": "iuf"}

#: The model's only version: ``/versions/1`` routes are the plain ones.
VERSION = "1"
#: Where the binary extension's JSON header length is given.
HEADER_LENGTH = "Inference-Header-Content-Length"
#: The endpoint's default address: this machine only.
HOST, PORT = "127.0.0.1", 8000
#: The largest request body by default (MB, 10^6 bytes).
MAX_BODY_MB = 64.0


def datatype(dtype: np.dtype) -> str:
    """The protocol's name of a numpy dtype (:data:`DATATYPES`); a :class:`DseError` for one it
    cannot carry."""
    try:
        return _DATATYPE_OF[np.dtype(dtype)]
    except KeyError:
        raise DseError(
            f"dtype {np.dtype(dtype)} has no Open Inference Protocol datatype; the endpoint "
            f"carries {', '.join(DATATYPES)}"
        ) from None


@dataclass(frozen=True)
class Reply:
    """An HTTP response: status, body and its headers."""

    status: int
    body: bytes
    headers: dict[str, str]

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> Reply:
        return cls(status, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    @classmethod
    def error(cls, status: int, message: str) -> Reply:
        return cls.json({"error": message}, status)


@dataclass(frozen=True)
class Wanted:
    """An output a request asks for, and whether as binary data."""

    name: str
    binary: bool | None  # None: as the request's binary_data_output says


@dataclass(frozen=True)
class Request:
    """A decoded inference request: its inputs, the outputs it asks for, and its id."""

    inputs: dict[str, np.ndarray]
    outputs: list[Wanted] | None  # None: every output, binary as ``binary`` says
    binary: bool  # the request's binary_data_output
    id: str | None


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _flag(params: dict[str, Any], key: str, what: str) -> bool | None:
    value = params.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{what}'s parameter {key} must be true or false, not {value!r}")
    return value


def _shape(value: Any, name: str) -> tuple[int, ...]:
    ok = isinstance(value, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    )
    if not ok:
        raise RequestError(f"input {name!r}: shape must be a list of sizes, not {value!r}")
    return tuple(value)


def _from_json(data: Any, dtype: np.dtype, name: str) -> np.ndarray:
    """``data``'s values as ``dtype``: numbers (booleans for BOOL), flat or nested evenly,
    within ``dtype``'s range."""
    try:
        values = np.asarray(data)
    except (ValueError, OverflowError):
        raise RequestError(
            f"input {name!r}: data must be a list of numbers, nested evenly"
        ) from None
    if values.dtype.kind not in _JSON_KINDS[dtype.kind]:
        want = "true or false" if dtype.kind == "b" else f"{_DATATYPE_OF[dtype]} numbers"
        raise RequestError(f"input {name!r}: data must hold {want}")
    cast = values.astype(dtype)
    if dtype.kind in "iu" and not np.array_equal(cast, values):
        raise RequestError(
            f"input {name!r}: data holds values out of {_DATATYPE_OF[dtype]}'s range"
        )
    return cast


def parse_request(body: bytes, header_length: str | None) -> Request:
    """The inference request in ``body``: a JSON object, then, when ``header_length`` (the
    ``Inference-Header-Content-Length`` header) is given, the binary data of the inputs that say
    their ``binary_data_size``, in the order of the inputs. A :class:`RequestError` (one line)
    names what is malformed; whether the model takes the inputs is the deployment's check."""
    n = len(body)
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            n = -1
        if not 0 <= n <= len(body):
            raise RequestError(
                f"{HEADER_LENGTH} must be the JSON header's length in bytes, 0 to the body's "
                f"{len(body)}, not {header_length!r}"
            )
    try:
        doc = json.loads(body[:n])
    except json.JSONDecodeError as e:
        hint = ""
        if header_length is None and e.msg == "Extra data":
            hint = f" (binary data after it needs the {HEADER_LENGTH} header)"
        raise RequestError(f"the request is not JSON: {e}{hint}") from None
    except ValueError as e:  # not UTF-8
        raise RequestError(f"the request is not JSON: {e}") from None
    doc = _obj(doc, "the request")
    params = _obj(doc.get("parameters", {}), "the request's parameters")
    rid = doc.get("id")
    if rid is not None and not isinstance(rid, str):
        raise RequestError(f"the request's id must be a string, not {rid!r}")
    entries = doc.get("inputs")
    if not isinstance(entries, list) or not entries:
        raise RequestError("the request must have inputs: a list of tensors")
    inputs: dict[str, np.ndarray] = {}
    offset = n
    for i, entry in enumerate(entries):
        entry = _obj(entry, f"input {i}")
        name = entry.get("name")
        if not isinstance(name, str):
            raise RequestError(f"input {i} must have a name (a string)")
        if name in inputs:
            raise RequestError(f"input {name!r} is given twice")
        shape = _shape(entry.get("shape"), name)
        kind = entry.get("datatype")
        dtype = DATATYPES.get(kind) if isinstance(kind, str) else None
        if dtype is None:
            raise RequestError(
                f"input {name!r}: datatype {kind!r} is not one of {', '.join(DATATYPES)}"
            )
        size = _obj(entry.get("parameters", {}), f"input {name!r}'s parameters").get(
            "binary_data_size"
        )
        count = math.prod(shape)
        if size is not None:
            if header_length is None:
                raise RequestError(
                    f"input {name!r} gives binary_data_size but the request has no "
                    f"{HEADER_LENGTH} header"
                )
            if type(size) is not int or size != count * dtype.itemsize:
                raise RequestError(
                    f"input {name!r}: binary_data_size is {size!r}; shape {list(shape)} of "
                    f"{kind} takes {count * dtype.itemsize} bytes"
                )
            if offset + size > len(body):
                raise RequestError(f"input {name!r}: the body ends before its binary data")
            array = np.frombuffer(body, dtype.newbyteorder("<"), count, offset).astype(dtype)
            offset += size
        elif "data" in entry:
            array = _from_json(entry["data"], dtype, name)
            if array.size != count:
                raise RequestError(
                    f"input {name!r}: data holds {array.size} values; shape {list(shape)} "
                    f"takes {count}"
                )
        else:
            raise RequestError(f"input {name!r} has neither data nor parameters.binary_data_size")
        inputs[name] = array.reshape(shape)
    if offset != len(body):
        raise RequestError(f"the body has {len(body) - offset} bytes after the inputs' binary data")
    binary = bool(_flag(params, "binary_data_output", "the request"))
    return Request(inputs, _wanted(doc.get("outputs")), binary, rid)


def _wanted(entries: Any) -> list[Wanted] | None:
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise RequestError('the request\'s outputs must be a list of {"name": ...} objects')
    out = []
    for i, entry in enumerate(entries):
        entry = _obj(entry, f"output {i}")
        name = entry.get("name")
        if not isinstance(name, str):
            raise RequestError(f"output {i} must have a name (a string)")
        params = _obj(entry.get("parameters", {}), f"output {name!r}'s parameters")
        for unsupported in ("classification", "shared_memory_region"):
            if unsupported in params:
                raise RequestError(
                    f"output {name!r}: parameter {unsupported} is not supported; ask for the "
                    "tensor itself"
                )
        binary = _flag(params, "binary_data", f"output {name!r}")
        out.append(Wanted(name, binary))
    return out


def encode_response(
    model: str, request: Request, results: dict[str, np.ndarray], order: list[str]
) -> Reply:
    """The inference response: the outputs the request asks for (all of ``order``, the model's
    outputs, when it names none), each as JSON data or binary data after the JSON."""
    wanted = request.outputs
    if wanted is None:
        wanted = [Wanted(name, request.binary) for name in order]
    outputs, blobs = [], []
    for w in wanted:
        array = np.ascontiguousarray(results[w.name])
        out: dict[str, Any] = {
            "name": w.name,
            "datatype": datatype(array.dtype),
            "shape": list(array.shape),
        }
        binary = request.binary if w.binary is None else w.binary
        if binary:
            blob = array.astype(array.dtype.newbyteorder("<")).tobytes()
            out["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            out["data"] = array.ravel().tolist()
        outputs.append(out)
    doc: dict[str, Any] = {"model_name": model, "model_version": VERSION, "outputs": outputs}
    if request.id is not None:
        doc["id"] = request.id
    header = json.dumps(doc).encode()
    if not blobs:
        return Reply(200, header, {"Content-Type": "application/json"})
    headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))}
    return Reply(200, b"".join([header, *blobs]), headers)


def infer(deployment: Deployment, body: bytes, header_length: str | None) -> Reply:
    """One inference request's reply: 400 for a request the model cannot take, 503 once the
    deployment has failed (blocks while the deployment runs it)."""
    try:
        request = parse_request(body, header_length)
        order = [p.name for p in deployment.outputs]
        for w in request.outputs or []:
            if w.name not in order:
                raise RequestError(
                    f"the model has no output named {w.name!r}; its outputs: {', '.join(order)}"
                )
        for port in deployment.inputs:  # in the protocol's words; the rest is the deployment's
            given = request.inputs.get(port.name)
            if given is not None and given.dtype != port.dtype:
                raise RequestError(
                    f"input {port.name!r} is {datatype(given.dtype)}, the model takes "
                    f"{datatype(port.dtype)}"
                )
        results = deployment.run(request.inputs)
        return encode_response(deployment.name, request, results, order)
    except RequestError as e:
        return Reply.error(400, str(e))
    except ServeError as e:
        return Reply.error(503, str(e))


def model_metadata(deployment: Deployment) -> dict[str, Any]:
    """The model's metadata: its name, version, platform and tensors."""

    def tensors(ports: list[Any]) -> list[dict[str, Any]]:
        return [
            {"name": p.name, "datatype": datatype(p.dtype), "shape": list(p.shape)} for p in ports
        ]

    return {
        "name": deployment.name,
        "versions": [VERSION],
        "platform": "onnxruntime_onnx",
        "inputs": tensors(deployment.inputs),
        "outputs": tensors(deployment.outputs),
    }


def server_metadata() -> dict[str, Any]:
    """The server's metadata: its name, version and the protocol extensions it speaks."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("dse")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"name": "dse", "version": version, "extensions": ["binary_tensor_data"]}


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _respond(reply: Reply) -> web.Response:
    return web.Response(status=reply.status, body=reply.body, headers=reply.headers)


def _json_errors(max_body_mb: float) -> Any:  # an aiohttp middleware
    """A middleware answering aiohttp's own errors (unknown route, wrong method, body over
    ``max_body_mb``) and the endpoint's bugs as JSON errors."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _respond(
                Reply.error(
                    413,
                    f"the request body is over the endpoint's limit of {max_body_mb:g} MB; send "
                    "less, or start the endpoint with a larger max_body_mb",
                )
            )
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return _respond(Reply.error(e.status, f"{e.reason}: {request.method} {request.path}"))
        except Exception as e:  # a bug of the endpoint's: said, and the endpoint goes on
            return _respond(Reply.error(500, f"internal error: {type(e).__name__}: {e}"))

    return middleware


class Endpoint:
    """The Open Inference Protocol over HTTP for a started ``deployment``, on ``host``:``port``
    (port 0: a free one), bodies up to ``max_body_mb`` MB (10^6 bytes; larger ones get 413).

    :meth:`start` runs the server in a thread of its own (its own event loop) and returns once
    it listens; inferences run in a pool of ``workers`` threads, so concurrent requests are in
    the deployment at once. :meth:`close` stops the server (not the deployment) and is
    idempotent; ``with`` starts and closes it."""

    def __init__(
        self,
        deployment: Deployment,
        host: str = HOST,
        port: int = 0,
        max_body_mb: float = MAX_BODY_MB,
        workers: int = 8,
    ) -> None:
        if max_body_mb <= 0:
            raise DseError(f"max_body_mb must be positive, not {max_body_mb}")
        self.deployment = deployment
        self.host, self.port = host, port
        self.max_body_mb = max_body_mb
        self._metadata = model_metadata(deployment)  # a dtype it cannot carry: said now
        self._workers = workers
        self._pool: cf.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` where it listens (the port it got, once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Endpoint:
        """Listen; a :class:`DseError` if the address cannot be had."""
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        started: cf.Future[None] = cf.Future()
        self._pool = cf.ThreadPoolExecutor(self._workers, thread_name_prefix="dse-http")
        self._loop = loop
        self._thread = threading.Thread(
            target=self._serve, args=(loop, started), name="dse-http", daemon=True
        )
        self._thread.start()
        try:
            started.result()
        except OSError as e:
            self._thread.join()
            self._thread = None
            self._pool.shutdown()
            raise DseError(
                f"cannot listen on {self.host}:{self.port}: {e.strerror or e}; choose another "
                "address"
            ) from None
        return self

    def close(self) -> None:
        """Stop listening and answering; requests in the deployment finish there."""
        thread, loop = self._thread, self._loop
        self._thread = None
        if thread is None or loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _serve(self, loop: asyncio.AbstractEventLoop, started: cf.Future[None]) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._open())
        except OSError as e:
            started.set_exception(e)
            loop.close()
            return
        started.set_result(None)
        try:
            loop.run_forever()
        finally:
            assert self._runner is not None
            loop.run_until_complete(self._runner.cleanup())
            left = asyncio.all_tasks(loop)  # connections' handlers cleanup did not wait for
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.close()

    async def _open(self) -> None:
        app = web.Application(
            client_max_size=int(self.max_body_mb * 1e6),
            middlewares=[_json_errors(self.max_body_mb)],
        )
        model = "/v2/models/{name}"
        versioned = "/v2/models/{name}/versions/{version}"
        app.router.add_get("/v2", self._server)
        app.router.add_get("/v2/health/live", self._live)
        app.router.add_get("/v2/health/ready", self._ready)
        for base in (model, versioned):
            app.router.add_get(base, self._model)
            app.router.add_get(base + "/ready", self._model_ready)
            app.router.add_post(base + "/infer", self._infer)
        # closing waits up to 5 s for the requests being answered
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        self.port = self._runner.addresses[0][1]

    def _unknown(self, request: web.Request) -> Reply | None:
        """404 for another model or version than the deployment's."""
        name = request.match_info["name"]
        version = request.match_info.get("version", VERSION)
        if name != self.deployment.name:
            return Reply.error(
                404, f"no model named {name!r}; this endpoint serves {self.deployment.name!r}"
            )
        if version != VERSION:
            return Reply.error(404, f"model {name!r} has no version {version!r}; it has {VERSION}")
        return None

    def _readiness(self) -> Reply:
        if self.deployment.alive:
            return Reply(200, b"", {})
        why = self.deployment.error or "it was closed"
        return Reply.error(503, f"the deployment has stopped: {why}")

    async def _server(self, request: web.Request) -> web.Response:
        return _respond(Reply.json(server_metadata()))

    async def _live(self, request: web.Request) -> web.Response:
        return _respond(Reply(200, b"", {}))

    async def _ready(self, request: web.Request) -> web.Response:
        return _respond(self._readiness())

    async def _model(self, request: web.Request) -> web.Response:
        return _respond(self._unknown(request) or Reply.json(self._metadata))

    async def _model_ready(self, request: web.Request) -> web.Response:
        return _respond(self._unknown(request) or self._readiness())

    async def _infer(self, request: web.Request) -> web.Response:
        unknown = self._unknown(request)
        if unknown is not None:
            return _respond(unknown)
        body = await request.read()
        header_length = request.headers.get(HEADER_LENGTH)
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(self._pool, infer, self.deployment, body, header_length)
        return _respond(reply)


def serve_forever(
    deployment: Deployment, host: str = HOST, port: int = PORT, max_body_mb: float = MAX_BODY_MB
) -> None:
    """Serve ``deployment`` at ``host``:``port`` until SIGINT or SIGTERM (then print why and
    return) or until the deployment fails (then raise its :class:`ServeError`). Signals are
    caught only when called from the main thread."""
    stop = threading.Event()
    caught: list[str] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        caught.append(signal.Signals(signum).name)
        stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        with Endpoint(deployment, host, port, max_body_mb) as endpoint:
            print(
                f"serving {deployment.name} at {endpoint.url}/v2/models/{deployment.name} "
                "(Open Inference Protocol; Ctrl-C stops)",
                flush=True,
            )
            while deployment.alive and not stop.wait(0.2):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:
        print(f"stopped serving {deployment.name}: {caught[0]}", file=sys.stderr, flush=True)
        return
    raise ServeError(f"stopped serving {deployment.name}: {deployment.error or 'it was closed'}")
