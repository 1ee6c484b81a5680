"""Mutual TLS through conf.rpc: a real gRPC server on 127.0.0.1 and certificates from trustme.

Only a client holding a certificate from the cluster's CA gets through; a client without a
certificate, one with a certificate from another CA, and a plaintext client are refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import trustme

from conf import Settings, TLSSettings
from conf.rpc import bind, make_channel, make_server

ECHO = "/hanamenode.test.Echo/Echo"
TIMEOUT = 10.0


@dataclass(frozen=True)
class Pki:
    ca: trustme.CA
    server: TLSSettings
    client: TLSSettings
    tmp: Path


def _write_leaf(ca: trustme.CA, leaf: trustme.LeafCert, tmp: Path, name: str) -> TLSSettings:
    ca_file, cert_file, key_file = (
        tmp / f"{name}-ca.pem",
        tmp / f"{name}.pem",
        tmp / f"{name}.key",
    )
    ca.cert_pem.write_to_path(ca_file)
    leaf.private_key_pem.write_to_path(key_file)
    for i, blob in enumerate(leaf.cert_chain_pems):
        blob.write_to_path(cert_file, append=i > 0)
    return TLSSettings(True, ca_file, cert_file, key_file)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    server = _write_leaf(ca, ca.issue_cert("localhost", "127.0.0.1"), tmp_path, "server")
    client = _write_leaf(ca, ca.issue_cert("client.hanamenode.test"), tmp_path, "client")
    return Pki(ca, server, client, tmp_path)


@pytest.fixture
def server_port(pki: Pki) -> Iterator[int]:
    # The server is configured the way a daemon is: from settings, via conf.rpc.
    settings = Settings.from_mapping(
        {
            "hanamenode.rpc.tls.ca-file": pki.server.ca_file or "",
            "hanamenode.rpc.tls.cert-file": pki.server.cert_file or "",
            "hanamenode.rpc.tls.key-file": pki.server.key_file or "",
            "hanamenode.rpc.handler.count": 2,
        }
    )
    assert settings.tls.enabled
    server = make_server(settings)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "hanamenode.test.Echo",
                {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, _context: request)},
            ),
        )
    )
    port = bind(server, "127.0.0.1:0", settings.tls)
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None).wait(TIMEOUT)


def echo(channel: grpc.Channel, payload: bytes = b"ping") -> bytes:
    with channel:
        # No (de)serializers: the echo method carries raw bytes.
        call = channel.unary_unary(ECHO, request_serializer=None, response_deserializer=None)
        response: bytes = call(payload, timeout=TIMEOUT)
        return response


def assert_refused(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as info:
        echo(channel)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_client_succeeds(pki: Pki, server_port: int) -> None:
    assert echo(make_channel(f"127.0.0.1:{server_port}", pki.client)) == b"ping"
    # The certificate also names "localhost".
    assert echo(make_channel(f"localhost:{server_port}", pki.client), b"x" * 100_000) == (
        b"x" * 100_000
    )


def test_client_without_certificate_is_refused(pki: Pki, server_port: int) -> None:
    assert pki.client.ca_file is not None
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.client.ca_file.read_bytes())
    assert_refused(grpc.secure_channel(f"127.0.0.1:{server_port}", credentials))


def test_client_with_certificate_from_another_ca_is_refused(pki: Pki, server_port: int) -> None:
    other_ca = trustme.CA()
    stranger = _write_leaf(other_ca, other_ca.issue_cert("client.hanamenode.test"), pki.tmp, "x")
    # It trusts the server's CA, so only the server's check of the client can refuse it.
    stranger = TLSSettings(True, pki.client.ca_file, stranger.cert_file, stranger.key_file)
    assert_refused(make_channel(f"127.0.0.1:{server_port}", stranger))


def test_plaintext_client_is_refused(server_port: int) -> None:
    assert_refused(make_channel(f"127.0.0.1:{server_port}", None))
    assert_refused(make_channel(f"127.0.0.1:{server_port}", TLSSettings(enabled=False)))


def test_client_refuses_a_server_from_another_ca(pki: Pki, server_port: int) -> None:
    other_ca = trustme.CA()
    other_ca.cert_pem.write_to_path(pki.tmp / "other-ca.pem")
    trusting_other = TLSSettings(
        True, pki.tmp / "other-ca.pem", pki.client.cert_file, pki.client.key_file
    )
    assert_refused(make_channel(f"127.0.0.1:{server_port}", trusting_other))
