"""Security: optional TLS / mTLS on the gRPC listener, loopback-only defaults, no prompt text in
logs, metrics or the decision log, emitted header values validated."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import grpc
import httpx
import pytest

from extproc.adapter.responses import header_option
from extproc.config import RouterConfig, parse_config
from extproc.service.app import RouterApp
from tests.hardening.helpers import CONFIG
from tests.pb import (
    chat_body,
    open_stream,
    read_response,
    req_body,
    req_headers,
    resp_body,
    resp_headers,
    routed_pool,
    run_stream,
)

OPENSSL = shutil.which("openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL or "openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server cert for 127.0.0.1/localhost and a client cert (EC P-256)."""
    if OPENSSL is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=tbr-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=d,
    )
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        _openssl(
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            f"/CN=tbr-{name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.crt",
            cwd=d,
        )
    return d


def _tls_config(pki: Path, *, mtls: bool) -> RouterConfig:
    server = {"tls_cert_path": str(pki / "server.crt"), "tls_key_path": str(pki / "server.key")}
    if mtls:
        server["tls_client_ca_path"] = str(pki / "ca.crt")
    return parse_config({**CONFIG, "server": server})


async def _call(channel: grpc.aio.Channel) -> str | None:
    call = open_stream(channel)
    await call.write(req_headers())
    await call.read()
    await call.write(req_body(chat_body("hi", max_tokens=3)))
    out = await read_response(call)
    await call.done_writing()
    return routed_pool(out)


def _creds(pki: Path, *, client_cert: bool) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / "client.key").read_bytes() if client_cert else None,
        certificate_chain=(pki / "client.crt").read_bytes() if client_cert else None,
    )


async def test_tls_listener_rejects_plaintext_and_serves_tls(pki: Path) -> None:
    async with RouterApp(_tls_config(pki, mtls=False), grpc_port=0, admin_port=0) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with grpc.aio.insecure_channel(target) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _call(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        async with grpc.aio.secure_channel(target, _creds(pki, client_cert=False)) as ch:
            assert await _call(ch) == "short"


async def test_mtls_requires_a_client_certificate(pki: Path) -> None:
    async with RouterApp(_tls_config(pki, mtls=True), grpc_port=0, admin_port=0) as app:
        target = f"127.0.0.1:{app.grpc_port}"
        async with grpc.aio.secure_channel(target, _creds(pki, client_cert=False)) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _call(ch)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        async with grpc.aio.insecure_channel(target) as ch:
            with pytest.raises(grpc.aio.AioRpcError):
                await _call(ch)
        async with grpc.aio.secure_channel(target, _creds(pki, client_cert=True)) as ch:
            assert await _call(ch) == "short"


def test_listeners_bind_to_loopback_by_default() -> None:
    cfg = parse_config({"pools": CONFIG["pools"]})
    assert cfg.server.grpc_host == "127.0.0.1"
    assert cfg.admin.host == "127.0.0.1"


async def test_admin_endpoint_is_not_reachable_on_other_interfaces(app: RouterApp) -> None:
    """The admin socket is bound to 127.0.0.1 only (not 0.0.0.0)."""
    import socket

    assert app._admin_sock is not None
    assert app._admin_sock.getsockname()[0] == "127.0.0.1"
    other = [
        str(a[4][0])
        for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        if not str(a[4][0]).startswith("127.")
    ]
    for addr in other[:1]:
        with pytest.raises(OSError):
            socket.create_connection((addr, app.admin_port), timeout=1).close()


SECRET = "zebra-umbrella-7319 confidential merger terms"


async def test_no_prompt_text_in_logs_metrics_or_decision_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Drive normal, unreadable, faulty and streamed requests carrying a marker string; the
    marker appears in no log record (DEBUG level), no metric, no /ratios row, no decision log."""
    log_path = tmp_path / "decisions.jsonl"
    cfg = parse_config({**CONFIG, "decision_log_path": str(log_path)})
    caplog.set_level(logging.DEBUG)
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        port = app.grpc_port
        await run_stream(port, [req_headers(), req_body(chat_body(SECRET * 10, max_tokens=5))])
        await run_stream(port, [req_headers(), req_body(b'{"messages": "' + SECRET.encode() + b'"')])
        await run_stream(port, [req_headers(), req_body(chat_body(SECRET, max_tokens=f"{SECRET}"))])
        await run_stream(
            port, [req_headers({":method": "POST", ":path": f"/v1/{SECRET}"}), req_body(SECRET.encode())]
        )
        await run_stream(
            port,
            [
                req_headers(),
                req_body(chat_body(SECRET, stream=True)),
                resp_headers({":status": "200", "content-type": "text/event-stream"}),
                resp_body(b'data: {"choices":[{"delta":{"content":"' + SECRET.encode() + b'"}}]}\n\n'),
                resp_body(b'data: {"usage":{"prompt_tokens":30}}\n\ndata: [DONE]\n\n', eos=True),
            ],
        )
        async with httpx.AsyncClient() as c:
            metrics = (await c.get(f"http://127.0.0.1:{app.admin_port}/metrics")).text
            ratios = (await c.get(f"http://127.0.0.1:{app.admin_port}/ratios")).text
    marker = "zebra-umbrella"
    assert marker not in metrics
    assert marker not in ratios
    assert marker not in log_path.read_text()
    assert len(log_path.read_text().splitlines()) == 5
    for rec in caplog.records:
        assert marker not in rec.getMessage()
        assert marker not in str(rec.exc_text or "")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("X-Tbr-Pool", "short"),
        ("x-tbr-pool", "a\r\nx-evil: 1"),
        ("x-tbr-pool", "a\nb"),
        ("x tbr", "v"),
        ("", "v"),
        ("x-tbr-pool", b"\x00"),
    ],
    ids=["upper_case_key", "crlf_value", "lf_value", "space_in_key", "empty_key", "nul_value"],
)
def test_emitted_header_values_are_validated(key: str, value: str | bytes) -> None:
    with pytest.raises(ValueError):
        header_option(key, value)


def test_pool_header_values_are_validated_at_config_load() -> None:
    from extproc.config import ConfigError

    for bad in ("sho rt", "a\r\nb", "ünï", ""):
        with pytest.raises(ConfigError):
            parse_config({"pools": [{"name": "p", "max_model_len": 10, "header_value": bad}]})
    with pytest.raises(ConfigError):
        parse_config({**CONFIG, "routing_header": "X-Tbr-Pool"})
