"""TLS for the clients: `wss://`, `https://` and `tcp+tls://` URLs.

The server's certificate is checked against the system's trust store, plus the CA bundle
named by `ECOTONE_CA_BUNDLE` (a PEM file: a private CA, a self-signed test certificate), and its
name against the URL's host. There is no switch to skip the check.
"""

from __future__ import annotations

import os
import ssl
from typing import Final

CA_VARIABLE: Final = "ECOTONE_CA_BUNDLE"
SECURE_SCHEMES: Final = {"wss": "ws", "https": "http", "tcp+tls": "tcp"}
"""Each TLS scheme, and the plain one it is the secure form of."""
DEFAULT_PORTS: Final = {"ws": 80, "http": 80, "wss": 443, "https": 443}


def client_context() -> ssl.SSLContext:
    """The context every TLS connection of the clients uses (made per connection: cheap,
    and the CA variable is read when connecting)."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    ca = os.environ.get(CA_VARIABLE)
    if ca:
        context.load_verify_locations(ca)
    return context
