"""Who may connect: the server's admission rules, in one place for every transport.

`ConnectionGate` counts open connections, in all and per peer address, and refuses past
`limits.max_connections` / `limits.max_connections_per_ip` (the transport writes the refusal:
an HTTP 503, or an error frame, then closes).
"""

from __future__ import annotations

from ecotone.kernel import Limits


class ConnectionGate:
    """How many connections are open, in all and per peer address; refuses past the limits."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.open = 0
        self._per_peer: dict[str, int] = {}
        self.refused = 0

    def admit(self, peer: str) -> bool:
        held = self._per_peer.get(peer, 0)
        if self.open >= self.limits.max_connections or held >= self.limits.max_connections_per_ip:
            self.refused += 1
            return False
        self.open += 1
        self._per_peer[peer] = held + 1
        return True

    def leave(self, peer: str) -> None:
        self.open -= 1
        held = self._per_peer.get(peer, 1) - 1
        if held:
            self._per_peer[peer] = held
        else:
            self._per_peer.pop(peer, None)
