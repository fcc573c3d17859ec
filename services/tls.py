"""TLS for Parley's HTTP clients: services signed by a private CA (the retriever, LLM servers on a
lab network) are reached over ``https://`` with that CA's certificate given as a file."""

from __future__ import annotations

import ssl
from pathlib import Path


def client_verify(ca_file: Path | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a context that trusts ``ca_file`` (PEM) besides nothing else, or True for
    the system's CAs when unset. A file that cannot be read fails here, at start-up."""
    if ca_file is None:
        return True
    return ssl.create_default_context(cafile=str(ca_file))
