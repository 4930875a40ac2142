"""Serving: a found mapping kept running for an application (:class:`Deployment`), a batch of
files through it (:mod:`dse.serve.batch`), and an inference endpoint for applications not written
in Python (:mod:`dse.serve.http`). ``python -m dse.serve DIR``."""

from __future__ import annotations

from dse.serve.deployment import Deployment, Port, RequestError, ServeError

__all__ = ["Deployment", "Port", "RequestError", "ServeError"]
