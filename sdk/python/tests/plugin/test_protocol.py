"""The plugin's side of go-plugin's protocol, and what it does with a
host that sends garbage."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gated.plugin._tls import new_identity
from gated.plugin.goplugin import goplugin_pb2 as gp
from gated.plugin.goplugin import goplugin_pb2_grpc as gp_grpc
from gated.plugin.v1 import reviewer_pb2 as pb
from gated.plugin.v1 import reviewer_pb2_grpc as pb_grpc

from pluginkit import write_plugin
from host import Launched, host_env, launch


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Launched]:
    p = launch(tmp_path, "echo")
    yield p
    p.close()


def wait_exit(proc: subprocess.Popen[bytes], within: float = 20) -> int:
    """The exit status, waiting at most `within` seconds (a bound on a
    hang, not a measure of speed)."""
    return proc.wait(within)


def review_request(proposal: bytes = b'{"id":"p1","reason":"r","context_summary":"Decision: approve"}', **kw: object) -> pb.ReviewRequest:
    return pb.ReviewRequest(review_id="rv1", proposal_json=proposal,
                            deadline_unix_ms=int((time.time() + 10) * 1000), **kw)  # type: ignore[arg-type]


def test_handshake_line(plugin: Launched) -> None:
    core, app, net, addr, proto, cert = plugin.line.split("|")
    assert (core, app, net, proto) == ("1", "1", "tcp", "grpc")
    host, port = addr.rsplit(":", 1)
    assert host == "127.0.0.1" and 10000 <= int(port) <= 25000
    assert "=" not in cert and "\n" not in cert
    c = x509.load_der_x509_certificate(base64.b64decode(cert + "=" * (-len(cert) % 4)))
    assert c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == ["localhost"]


def test_two_plugins_never_share_a_port(tmp_path: Path) -> None:
    a = launch(tmp_path, "echo")
    b = launch(tmp_path, "sync-sop")
    try:
        assert a.addr != b.addr
        for p in (a, b):
            d = pb_grpc.ReviewerStub(p.channel()).Describe(pb.DescribeRequest(), timeout=10)
            assert d.name in ("echo", "sync-sop")
    finally:
        a.close()
        b.close()


def test_only_the_host_certificate_is_accepted(plugin: Launched) -> None:
    for ch in (plugin.channel(plaintext=True), plugin.channel(ident=new_identity())):
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.ReviewerStub(ch).Describe(pb.DescribeRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    d = pb_grpc.ReviewerStub(plugin.channel()).Describe(pb.DescribeRequest(), timeout=5)
    assert (d.name, d.version, d.max_concurrency) == ("echo", "1.0.0", 8)


def test_health_serves_the_plugin_service(plugin: Launched) -> None:
    res = health_pb2_grpc.HealthStub(plugin.channel()).Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=5)
    assert res.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("note,req,want", [
    ("proposal not JSON", review_request(b"\xff\x00garbage"), "decoding the proposal"),
    ("proposal not an object", review_request(b"[1,2]"), "want a JSON object"),
    ("run context not an object", review_request(policy=pb.PolicyContext(run_json=b'"run"')), "run context"),
    ("history not an array", review_request(policy=pb.PolicyContext(history_json=b"{}")), "verdict history"),
    ("deadline out of range", pb.ReviewRequest(proposal_json=b"{}", deadline_unix_ms=-(1 << 62)), "deadline"),
])
def test_a_malformed_review_is_a_clear_error(plugin: Launched, note: str, req: pb.ReviewRequest, want: str) -> None:
    stub = pb_grpc.ReviewerStub(plugin.channel())
    with pytest.raises(grpc.RpcError) as e:
        stub.Review(req, timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and want in (e.value.details() or ""), e.value
    # And the plugin serves on.
    ok = stub.Review(review_request(), timeout=10)
    assert ok.text == "Decision: approve"


def test_garbage_on_the_broker_and_the_socket(plugin: Launched) -> None:
    ch = plugin.channel()
    garbage = [
        gp.ConnInfo(service_id=7, network="udp", address="x"),
        gp.ConnInfo(service_id=0, network="unix", address="/nowhere"),
        gp.ConnInfo(service_id=8, network="unix", address="a" * 10000),
        gp.ConnInfo(service_id=9, network="tcp", address="127.0.0.1:1", knock=gp.ConnInfo.Knock(knock=True)),
    ]
    # The plugin ignores all of it, answers nothing, and ends the stream
    # when the host does.
    assert list(gp_grpc.GRPCBrokerStub(ch).StartStream(iter(garbage), timeout=10)) == []
    # Raw bytes at the plugin's port, no TLS at all.
    host, port = plugin.addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(os.urandom(4096))
    # A review that names a broker id the host never announced fails with
    # an error that says so, within its deadline; never an approval.
    stub = pb_grpc.ReviewerStub(ch)
    req = review_request(tool_host_broker_id=7, persona=pb.Persona(tools=[pb.Tool(name="get_proposal")]))
    req.deadline_unix_ms = int((time.time() + 2) * 1000)
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        stub.Review(req, timeout=10)
    took = time.monotonic() - start
    assert e.value.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED), e.value
    print(f"unannounced broker id: {e.value.code().name} after {took:.2f}s: {e.value.details()}")
    res = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=5)
    assert res.status == health_pb2.HealthCheckResponse.SERVING


def test_broker_dial_refuses_a_service_without_the_host_certificate(tmp_path: Path, plugin: Launched) -> None:
    """The plugin dials a brokered service only if it presents the host's
    certificate: a server with another certificate gets no tool call."""
    from concurrent import futures

    impostor = new_identity()
    srv = grpc.server(futures.ThreadPoolExecutor(2))
    called: list[str] = []

    class Tools(pb_grpc.ToolHostServicer):
        def CallTool(self, request: pb.CallToolRequest, context: grpc.ServicerContext) -> pb.CallToolResponse:
            called.append(request.name)
            return pb.CallToolResponse(result_json=b"{}")

    pb_grpc.add_ToolHostServicer_to_server(Tools(), srv)
    sock = tmp_path / "tools.sock"
    srv.add_secure_port(f"unix:{sock}", grpc.ssl_server_credentials([(impostor.key_pem, impostor.cert_pem)]))
    srv.start()
    try:
        ch = plugin.channel()
        infos = [gp.ConnInfo(service_id=5, network="unix", address=str(sock))]
        stream = gp_grpc.GRPCBrokerStub(ch).StartStream(iter(infos + []), timeout=30)
        req = review_request(tool_host_broker_id=5, persona=pb.Persona(tools=[pb.Tool(name="get_proposal")]))
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.ReviewerStub(ch).Review(req, timeout=15)
        assert "ToolFailed" in (e.value.details() or ""), e.value
        assert called == []
        stream.cancel()
    finally:
        srv.stop(0)


def test_shutdown_exits_zero(plugin: Launched) -> None:
    gp_grpc.GRPCControllerStub(plugin.channel()).Shutdown(gp.Empty(), timeout=5)
    assert wait_exit(plugin.proc) == 0


def test_sigterm_cancels_reviews_and_exits_zero(tmp_path: Path) -> None:
    p = launch(tmp_path, "slow")
    try:
        fut = pb_grpc.ReviewerStub(p.channel()).Review.future(review_request(), timeout=30)
        time.sleep(0.5)
        p.proc.send_signal(signal.SIGTERM)
        assert wait_exit(p.proc) == 0
        with pytest.raises(grpc.RpcError):
            fut.result()
    finally:
        p.close()


def test_exits_when_the_host_dies(tmp_path: Path) -> None:
    """A parent that starts the plugin and dies: the plugin notices that
    its parent changed and exits 3."""
    plugin = write_plugin(tmp_path / "echo", "echo")
    host = new_identity()
    pidfile = tmp_path / "pid"
    parent = subprocess.run(
        [sys.executable, "-c",
         "import subprocess, sys, time, os\n"
         f"p = subprocess.Popen([{str(plugin)!r}], stdout=subprocess.PIPE)\n"
         "p.stdout.readline()\n"
         f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
         "os._exit(0)\n"],
        env=host_env(host), timeout=60,
    )
    assert parent.returncode == 0
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            # An exited process whose new parent does not reap it is a zombie.
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"plugin {pid} outlived its host")


def test_stdout_after_the_handshake_goes_to_the_stdio_stream(tmp_path: Path) -> None:
    p = launch(tmp_path, "noisy")
    try:
        ch = p.channel()
        stream = gp_grpc.GRPCStdioStub(ch).StreamStdio(empty_pb2.Empty(), timeout=10)
        pb_grpc.ReviewerStub(ch).Describe(pb.DescribeRequest(), timeout=5)
        first = next(stream)
        assert first.channel == gp.StdioData.STDOUT and b"describing" in first.data
        stream.cancel()
    finally:
        p.close()


@pytest.mark.parametrize("note,env,want", [
    ("no magic cookie", {"GATED_PLUGIN": ""}, "not meant to be run by hand"),
    ("no client certificate", {"PLUGIN_CLIENT_CERT": ""}, "PLUGIN_CLIENT_CERT is not set"),
    ("garbage client certificate", {"PLUGIN_CLIENT_CERT": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}, "not a certificate"),
    ("other protocol versions", {"PLUGIN_PROTOCOL_VERSIONS": "2,3"}, "protocol versions [2, 3]"),
    ("garbage protocol versions", {"PLUGIN_PROTOCOL_VERSIONS": "1;rm -rf"}, "is not a version number"),
])
def test_a_host_without_the_protocol_gets_a_clear_error(tmp_path: Path, note: str, env: dict[str, str], want: str) -> None:
    plugin = write_plugin(tmp_path / "echo", "echo")
    r = subprocess.run([str(plugin)], env=host_env(new_identity(), **env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and want in r.stderr and r.stdout == "", (r.returncode, r.stdout, r.stderr)


def test_help_by_hand(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path / "echo", "echo")
    r = subprocess.run([str(plugin), "--help"], env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "echo 1.0.0 is a reviewer plugin for gated" in r.stdout, r




def test_the_deadline_ends_a_slow_sync_review(tmp_path: Path) -> None:
    p = launch(tmp_path, "slow")
    try:
        ch = p.channel()
        req = review_request()
        req.deadline_unix_ms = int((time.time() + 1) * 1000)
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.ReviewerStub(ch).Review(req, timeout=10)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e.value
        res = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="plugin"), timeout=5)
        assert res.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        p.close()


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_review_carries_gated_s_trace_context(tmp_path: Path) -> None:
    p = launch(tmp_path, "traced")
    try:
        stub = pb_grpc.ReviewerStub(p.channel())
        got = stub.Review(review_request(), metadata=(("traceparent", TRACEPARENT), ("tracestate", "v=1")), timeout=10)
        assert got.notes == f"traceparent={TRACEPARENT} tracestate=v=1"
        bare = stub.Review(review_request(), timeout=10)
        assert bare.notes == "traceparent=None tracestate=None"
    finally:
        p.close()


def test_parent_context_names_the_remote_span() -> None:
    from opentelemetry import trace

    from gated.tracing import parent_context

    sc = trace.get_current_span(parent_context(TRACEPARENT, "v=1")).get_span_context()
    assert sc.is_valid and sc.is_remote
    assert f"{sc.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736" and f"{sc.span_id:016x}" == "00f067aa0ba902b7"
    assert parent_context(None) is None
    assert not trace.get_current_span(parent_context("garbage")).get_span_context().is_valid
