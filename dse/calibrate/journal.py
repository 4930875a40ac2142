"""A calibration's measurements as they come: a journal beside its output, to resume or refit.

Every measurement a calibration takes (a unit of the compute step on a device, a link
benchmark, a network's deployments over their rounds, the sub-models of a mapping) is a JSON
result under a **key** that says what was measured (what, where, with which settings). The
journal ``OUT.measurements.jsonl``, beside the coefficients file ``OUT``, gets each result as
one line the moment it is taken (flushed to the disk), after a first line naming the platform;
a last line ``{"done": true}`` follows once ``OUT`` is written. So:

* an interrupted or failed calibration keeps everything it measured;
* ``resume=true`` takes every result whose key the journal has and measures only the rest
  (a changed setting changes the keys it touches: those are measured again);
* ``refit=true`` measures nothing: it fits the journal's results (after a change to the
  fits, or to see them again); a result the journal lacks is one line saying so;
* a calibration into ``OUT`` whose journal stopped before its end refuses to start afresh
  (its measurements would be lost): one line says to resume, refit or delete the journal.
  A finished journal is replaced by the next calibration's.

The design is written down in ``docs/reference/calibration-journal.md``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dse.calibrate.ondevice import UnitFailed
from dse.errors import DseError
from dse.files import write_text
from dse.platform import Platform

#: The journal of ``OUT`` is ``OUT`` with this suffix in place of its own.
SUFFIX = ".measurements.jsonl"
#: A unit's result that says it failed on its device, and why (:meth:`Journal.unit`).
FAILED = "unit_failed"
#: What a journal that cannot be written, holding no measurement, tells the user to do.
WRITE_ELSEWHERE = "free space there or write elsewhere (out=)"
#: The largest journal read (a full calibration's is a few MB).
MAX_BYTES = 256 * 2**20

T = TypeVar("T")


def journal_path(out: Path) -> Path:
    return Path(out).with_suffix(SUFFIX)


def platform_id(platform: Platform) -> str:
    """What the journal's measurements depend on of the platform: its devices and links."""
    devices = [[d.name, d.host, d.kind, d.type, d.threads, d.memory_mb] for d in platform.devices]
    return json.dumps({"name": platform.name, "devices": devices, "network": platform.network})


def key_of(what: str, request: dict[str, Any]) -> str:
    """A measurement's key: ``what`` and its request (a ``directory``, temporary, left out)."""
    return json.dumps({"what": what, **{k: v for k, v in request.items() if k != "directory"}},
                      sort_keys=True)  # fmt: skip


class Journal:
    """The journal of one calibration (the module's docstring): ``take`` a measurement."""

    def __init__(self, out: Path, platform: Platform, resume: bool, refit: bool) -> None:
        """The journal of the coefficients file ``out``, for a calibration of ``platform``
        that resumes, refits or neither."""
        if resume and refit:
            raise DseError("resume=true and refit=true: choose one (refit measures nothing)")
        self.out, self.path, self.refit = Path(out), journal_path(out), refit
        self.results: dict[str, Any] = {}
        self.taken = self.reused = 0
        ident = platform_id(platform)
        old = self._read(ident) if self.path.exists() else None
        if old is None and (resume or refit):
            raise DseError(
                f"{'resume' if resume else 'refit'}=true: no measurements to "
                f"{'go on with' if resume else 'fit'} ({self.path} does not exist): calibrate "
                "without it"
            )
        if old is not None and not old["done"] and not (resume or refit):
            raise DseError(
                f"a calibration into {self.out} stopped before its end; "
                f"its {len(old['results'])} measurements are in {self.path}: resume=true "
                "measures only what is missing, refit=true fits what is there, or delete it "
                "to start again"
            )
        if old is not None and (resume or refit):
            self.results = old["results"]
        if refit:
            return
        header = {"journal": 1, "platform": ident, "started": now()}
        lines = [header, *({"key": k, "result": v} for k, v in self.results.items())]
        text = "".join(json.dumps(x) + "\n" for x in lines)
        write_text(self.path, text, fix=WRITE_ELSEWHERE)  # failing: the old journal as it was
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)  # kept open for the calibration
        self.size = len(text.encode())  # what the journal holds whole

    def _read(self, ident: str) -> dict[str, Any]:
        """The journal's results, and whether it was finished; one line when it is not ours."""
        if self.path.stat().st_size > MAX_BYTES:
            raise DseError(f"{self.path} is larger than a calibration's journal can be")
        results: dict[str, Any] = {}
        done = False
        try:
            lines = self.path.read_text().splitlines()
            header = json.loads(lines[0]) if lines else {}
            for line in lines[1:]:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill: the rest is good
                    continue
                if entry.get("done"):
                    done = True
                elif isinstance(entry.get("key"), str) and "result" in entry:
                    results[entry["key"]] = entry["result"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DseError(f"{self.path} is not a calibration's journal ({exc})") from None
        if not isinstance(header, dict) or header.get("journal") != 1:
            raise DseError(f"{self.path} is not a calibration's journal: delete it or move it")
        if header.get("platform") != ident:
            raise DseError(
                f"{self.path} holds measurements of another platform (or another version of "
                "it): delete it to calibrate this one"
            )
        return {"results": results, "done": done}

    def has(self, key: str) -> bool:
        """Whether the journal holds a result under ``key``."""
        return key in self.results

    def take(self, key: str, measure: Callable[[], T]) -> T:
        """The result under ``key``: the journal's, else ``measure()``'s, written at once."""
        if key in self.results:
            self.reused += 1
            return self.results[key]
        if self.refit:
            what = json.loads(key).get("what", "a measurement")
            raise DseError(
                f"refit=true: {self.path} has no measurement of {what} ({key}): resume=true "
                "measures it"
            )
        result = measure()
        self.taken += 1
        self._write({"key": key, "result": result})
        self.results[key] = result
        return result

    def unit(self, what: str, run: Callable[[dict], T]) -> Callable[[dict], T]:
        """``run`` (a request -> its result) through the journal, keyed by ``what`` and the
        request. A unit that failed on its device (:class:`UnitFailed`: VGG-16 on 512 MB) is
        kept as its reason, and fails again when taken back: a refit leaves that network
        out as the calibration did, where it used to find no measurement and stop."""

        def failed_as_result(request: dict) -> Any:
            try:
                return run(request)
            except UnitFailed as exc:
                return {FAILED: str(exc)}

        def journaled(request: dict) -> T:
            result = self.take(key_of(what, request), lambda: failed_as_result(request))
            if isinstance(result, dict) and FAILED in result:
                raise UnitFailed(result[FAILED])
            return result

        return journaled

    def finish(self) -> None:
        """The coefficients are written: the journal is complete."""
        if not self.refit:
            self._write({"done": True, "ended": now()})
            os.close(self.fd)

    def _write(self, entry: dict[str, Any]) -> None:
        """Append ``entry`` as a line, on the disk before it returns. A write that fails (a
        full disk) is one line, the journal cut back to its whole lines; one that holds no
        measurement is removed, leaving nothing behind."""
        data = (json.dumps(entry) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            os.fsync(self.fd)
            self.size += len(data)
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        why = f"cannot write {self.path} ({exc.strerror or exc})"
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, self.size)
        os.close(self.fd)
        if not self.results:
            self.path.unlink(missing_ok=True)
            raise DseError(f"{why}: {WRITE_ELSEWHERE}") from None
        raise DseError(
            f"{why}: its {len(self.results)} measurements are kept; free space there and "
            "resume=true measures only what is missing"
        ) from None


class NoJournal(Journal):
    """Measures everything and keeps nothing (a calibration called as a library)."""

    def __init__(self) -> None:
        self.refit = False
        self.results = {}
        self.taken = self.reused = 0

    def take(self, key: str, measure: Callable[[], T]) -> T:
        return measure()

    def finish(self) -> None:
        pass


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
