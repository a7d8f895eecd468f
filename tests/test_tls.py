"""TLS on every transport over TCP (`[tls]`): wss://, https://, tcp+tls://, with the blocking
and async clients, a vector env, a token; certificates from a test CA (trustme) that the
clients trust through ECOTONE_CA_BUNDLE. A client that does not trust the server, a plain client
on the TLS port and bytes that are not TLS at all are refused, and the server goes on."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import ecotone
from ecotone.kernel.config import AuthConfig, TlsConfig
from tests.conftest import run_server

SCHEMES = {"websocket": "wss", "http": "https", "tcp": "tcp+tls"}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> TlsConfig:
    folder = tmp_path_factory.mktemp("tls")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(folder / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    for extra in cert.cert_chain_pems[1:]:
        with open(folder / "cert.pem", "ab") as f:
            f.write(extra.bytes())
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    return TlsConfig(cert=str(folder / "cert.pem"), key=str(folder / "key.pem"))


@pytest.fixture
def trusted(tls_files: TlsConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    assert tls_files.cert is not None
    ca_file = str(Path(tls_files.cert).parent / "ca.pem")
    monkeypatch.setenv("ECOTONE_CA_BUNDLE", ca_file)
    yield ca_file


@pytest.mark.parametrize("transport", sorted(SCHEMES))
def test_every_tcp_transport_serves_over_tls_to_both_clients(
    transport: str, tls_files: TlsConfig, trusted: str
) -> None:
    with run_server("echo", transport=transport, tls=tls_files) as server:
        assert server.url.startswith(f"{SCHEMES[transport]}://127.0.0.1:")
        with ecotone.connect(server.url) as env:
            env.reset()
            big = "x" * 300_000  # many TLS records in one message
            assert env.step({"message": big}).observation["length"] == len(big)
            assert env.step({"message": "hi"}).observation["echoed"] == "hi"

        async def play() -> None:
            async with ecotone.aconnect(server.url) as env:
                await env.reset()
                assert (await env.step({"message": "async"})).observation["echoed"] == "async"

        import anyio

        anyio.run(play, backend="trio")
        anyio.run(play, backend="asyncio")


def test_a_vector_env_over_wss_reads_what_tls_has_already_decrypted(
    tls_files: TlsConfig, trusted: str
) -> None:
    with (
        run_server("counter", tls=tls_files) as one,
        run_server("counter", tls=tls_files) as two,
    ):
        with ecotone.VectorEnv([one.url, two.url], 16) as vec:
            vec.reset()
            for _ in range(50):
                _, rewards, *_ = vec.step([{"delta": 1}] * 16)
                assert list(rewards) == [1.0] * 16


def test_tls_and_a_token_together(tls_files: TlsConfig, trusted: str) -> None:
    with run_server("counter", tls=tls_files, auth=AuthConfig(token="over-tls")) as server:
        with pytest.raises(ecotone.AccessDenied):
            ecotone.connect(server.url)
        with ecotone.connect(server.url, token="over-tls") as env:
            env.reset()


def test_untrusted_plain_and_garbage_clients_are_refused_and_the_server_goes_on(
    tls_files: TlsConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ECOTONE_CA_BUNDLE", raising=False)
    with run_server("counter", transport="http", tls=tls_files) as server:
        with pytest.raises(ecotone.ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
            ecotone.connect(server.url)
        plain = server.url.replace("https://", "http://")
        with pytest.raises((ecotone.ConnectionLost, ecotone.EcotoneError)):
            ecotone.connect(plain, connect_timeout=5)
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"\x00\x01 not a TLS record at all\r\n\r\n" * 10)
            try:  # dropped (or an alert) at once; a hang would be a TimeoutError here
                sock.recv(100)
            except ConnectionResetError:
                pass
        assert Path(str(tls_files.cert)).parent.joinpath("ca.pem").exists()
        monkeypatch.setenv("ECOTONE_CA_BUNDLE", str(Path(str(tls_files.cert)).parent / "ca.pem"))
        with ecotone.connect(server.url) as env:  # and the server went on
            env.reset()


def test_unusable_tls_files_are_an_error_before_serving(tmp_path: Path) -> None:
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate\n")
    done = subprocess.run(
        [sys.executable, "-m", "ecotone", "serve", "counter", "--port", "0", "--tls-cert", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "[tls] cannot load" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ecotone",
            "serve",
            "counter",
            "--transport",
            "unix",
            "--host",
            str(tmp_path / "s.sock"),
            "--tls-cert",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "transports over TCP" in done.stderr


def test_a_launched_server_under_tls_is_probed_and_reached(
    tls_files: TlsConfig, trusted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECOTONE_TLS_CERT", str(tls_files.cert))
    monkeypatch.setenv("ECOTONE_TLS_KEY", str(tls_files.key))
    with ecotone.launch("counter", provider="process") as env:
        assert env.connection.url.startswith("wss://127.0.0.1:")
        env.reset()
        assert env.step({"delta": 4}).observation["count"] == 4


@pytest.mark.parametrize(
    ("transport", "scheme"), [("http", "openenv+https"), ("websocket", "openenv+wss")]
)
def test_openenvs_protocol_over_tls_from_ecotones_client(
    transport: str, scheme: str, tls_files: TlsConfig, trusted: str
) -> None:
    with run_server("counter", transport=transport, tls=tls_files) as server:
        url = scheme + "://" + server.url.split("://", 1)[1]
        with ecotone.connect(url) as env:
            assert env.describe().name == "counter"  # /metadata and /schema over https
            env.reset(seed=0)
            assert env.step({"delta": 2}).observation["count"] == 2
