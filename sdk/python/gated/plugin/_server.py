"""The plugin process: go-plugin's handshake, mutual TLS, the reviewer's
gRPC service and the services go-plugin's host expects beside it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from gated.plugin._tls import SERVER_NAME, Identity, new_identity
from gated.plugin._types import (
    Description,
    HandshakeError,
    MalformedRequest,
    Request,
    Reviewer,
    ToolDenied,
    ToolFailed,
)
from gated.plugin._wire import (
    CORE_PROTOCOL_VERSION,
    MAGIC_COOKIE_KEY,
    MAGIC_COOKIE_VALUE,
    MAX_MESSAGE_BYTES,
    negotiate_version,
    read_client_cert,
    request_from_wire,
    response_to_wire,
)
from gated.plugin.goplugin import goplugin_pb2 as gp
from gated.plugin.goplugin import goplugin_pb2_grpc as gp_grpc
from gated.plugin.v1 import reviewer_pb2 as pb
from gated.plugin.v1 import reviewer_pb2_grpc as pb_grpc

#: The plugin's logger. Its records go to gated as JSON lines on stderr,
#: which gated files under the plugin's name. Never log keys or prompts.
log = logging.getLogger("gated.plugin")

#: How long reviews in flight get to return after SIGTERM.
SHUTDOWN_GRACE = 5.0
#: How often the plugin looks for its host; it exits when the host is gone.
PARENT_POLL = 1.0
#: How long a review waits for the host to announce a brokered service.
BROKER_WAIT = 5.0
#: Brokered services remembered at most (the host offers one ToolHost per
#: plugin process, renewed at most 64 times).
MAX_BROKERED = 256
#: The largest network address a ConnInfo may carry.
MAX_ADDRESS_BYTES = 4096
#: Standard output kept for the host's stdio stream before it is dropped.
MAX_STDIO_PENDING = 1 << 20
#: Exit status when the host went away.
EXIT_HOST_GONE = 3

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]

T = TypeVar("T")


class _JSONLines(logging.Handler):
    """Writes records as the JSON lines go-plugin's host parses (hclog's
    format: @level, @message, @timestamp, @module)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def emit(self, record: logging.LogRecord) -> None:
        level = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn"}.get(record.levelno, "error")
        doc: dict[str, Any] = {
            "@level": level,
            "@message": record.getMessage(),
            "@module": "plugin",
            "@timestamp": datetime.now(UTC).isoformat(timespec="microseconds"),
        }
        if record.exc_info:
            doc["error"] = "".join(traceback.format_exception(*record.exc_info))
        try:
            os.write(self._fd, (json.dumps(doc) + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def help_asked(argv: list[str], env: dict[str, str] | os._Environ[str]) -> bool:
    """A person ran the plugin to ask what it is: one argument, -h, -help
    or --help, and no handshake cookie from gated."""
    if env.get(MAGIC_COOKIE_KEY) == MAGIC_COOKIE_VALUE:
        return False
    return len(argv) == 1 and argv[0] in ("-h", "-help", "--help")


async def _call(fn: Callable[..., T | Awaitable[T]], pool: concurrent.futures.Executor, *args: Any) -> T:
    """Run a reviewer method: a coroutine function on the loop, anything
    else in a worker thread, so that it never stalls health checks."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)  # type: ignore[no-any-return]
    loop = asyncio.get_running_loop()
    out = await loop.run_in_executor(pool, lambda: fn(*args))
    if inspect.isawaitable(out):
        return await out
    return out


def _print_help(reviewer: Reviewer) -> None:
    what = "this program"
    try:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        d = asyncio.run(asyncio.wait_for(_call(reviewer.describe, pool), 5))
        if isinstance(d, Description) and d.name:
            what = f"{d.name} {d.version}".strip()
    except Exception:  # noqa: BLE001 - help must print whatever describe does
        pass
    sys.stdout.write(
        f"""{what} is a reviewer plugin for gated. gated starts it and talks to it
over gRPC; it is not meant to be run by hand. To use it, put the executable
in a plugin directory DIR, then:

  gated plugins test DIR/NAME     # the conformance checks
  gated plugins lock DIR          # pin its SHA-256 in DIR/gated-plugins.lock
  gated serve --plugins-dir DIR   # personas name it as plugin NAME, its file name
"""
    )
    sys.stdout.flush()


def serve(reviewer: Reviewer) -> NoReturn:
    """Run the plugin until gated stops it; never returns.

    The process exits 0 when gated asks it to (the controller's Shutdown,
    or SIGTERM: reviews in flight are cancelled and get SHUTDOWN_GRACE
    seconds to return), and 3 when gated is gone. Run by hand with the
    single argument -h or --help it prints what it is and exits 0; run
    by anything but a gated host (no magic cookie, no protocol version 1,
    no client certificate for mutual TLS) it says so on stderr and exits 1.

    Standard output belongs to the handshake: from here on, what the
    plugin prints goes to gated's stdio stream instead. Logs go to
    ``gated.plugin.log``.
    """
    # The parent is the host: taken before anything else, so that a host
    # that dies during the handshake is noticed too.
    parent = os.getppid()
    if help_asked(sys.argv[1:], os.environ):
        _print_help(reviewer)
        sys.exit(0)
    handler = _JSONLines(2)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
            raise HandshakeError(
                "This program is a gated reviewer plugin. It is not meant to be run by hand: "
                "gated starts it (see `gated plugins --help`)."
            )
        negotiate_version(os.environ.get("PLUGIN_PROTOCOL_VERSIONS"))
        client_pem = read_client_cert(os.environ.get("PLUGIN_CLIENT_CERT"))
    except HandshakeError as e:
        sys.stderr.write(f"{e}\n")
        sys.stderr.flush()
        sys.exit(1)
    multiplex = os.environ.get("PLUGIN_MULTIPLEX_GRPC", "") != ""
    sys.stdout.flush()
    handshake_fd = os.dup(1)
    stdio_r, stdio_w = os.pipe()
    os.dup2(stdio_w, 1)
    os.close(stdio_w)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    plugin = _Plugin(reviewer, client_pem, handshake_fd, stdio_r, multiplex, parent)
    code = 1
    try:
        code = asyncio.run(plugin.run())
    except Exception:
        log.exception("plugin failed")
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:  # noqa: BLE001, S110 - nothing left to tell
                pass
    # Worker threads of synchronous reviewers may still run: the process
    # ends now, not when they return.
    os._exit(code)


class _Plugin:
    def __init__(
        self, reviewer: Reviewer, client_pem: bytes, handshake_fd: int, stdio_r: int, multiplex: bool, parent: int
    ) -> None:
        self.parent = parent
        self.reviewer = reviewer
        self.client_pem = client_pem
        self.handshake_fd = handshake_fd
        self.stdio_r = stdio_r
        self.multiplex = multiplex
        self.identity: Identity = new_identity()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="review")
        self.inflight: dict[asyncio.Task[Any], Request | None] = {}
        self.broker = _Broker(self)
        self.stdio = _Stdio()
        self.stopping = False
        self.exit_code = 0
        self.grace = SHUTDOWN_GRACE
        self._stop: asyncio.Event | None = None

    def request_stop(self, grace: float) -> None:
        """Stop serving: cancel reviews in flight and exit once they
        returned or grace seconds passed."""
        if self._stop is None or self.stopping:
            return
        self.stopping = True
        self.grace = grace
        for task, req in list(self.inflight.items()):
            if req is not None:
                req.cancelled.set()
            task.cancel()
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        # No SO_REUSEPORT: with it a second plugin (or any process of the
        # user) could bind the same port and take some of gated's
        # connections, which then fail their TLS check.
        server = grpc.aio.server(options=[*_CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)])
        pb_grpc.add_ReviewerServicer_to_server(_ReviewerService(self), server)  # type: ignore[no-untyped-call]
        health = HealthServicer()
        await health.set("plugin", health_pb2.HealthCheckResponse.SERVING)
        await health.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        gp_grpc.add_GRPCBrokerServicer_to_server(self.broker, server)  # type: ignore[no-untyped-call]
        gp_grpc.add_GRPCControllerServicer_to_server(_Controller(self), server)  # type: ignore[no-untyped-call]
        gp_grpc.add_GRPCStdioServicer_to_server(self.stdio, server)  # type: ignore[no-untyped-call]
        creds = grpc.ssl_server_credentials(
            [(self.identity.key_pem, self.identity.cert_pem)],
            root_certificates=self.client_pem,
            require_client_auth=True,
        )
        port = _bind(server, creds)
        await server.start()
        self.stdio.start(loop, self.stdio_r)
        line = (
            f"{CORE_PROTOCOL_VERSION}|{negotiate_version(os.environ.get('PLUGIN_PROTOCOL_VERSIONS'))}"
            f"|tcp|127.0.0.1:{port}|grpc|{self.identity.handshake_field()}"
        )
        if self.multiplex:
            # gated never asks for broker multiplexing; a host that does
            # learns that this plugin does not do it.
            line += "|false"
        os.write(self.handshake_fd, (line + "\n").encode("ascii"))
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        # go-plugin's plugins ignore interrupts: a Ctrl-C on gated's
        # terminal is for gated, which stops its plugins itself.
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        watcher = asyncio.create_task(self._watch_parent(self.parent))
        await self._stop.wait()
        pending = [t for t in self.inflight if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.grace)
        await server.stop(grace=0.5)
        watcher.cancel()
        return self.exit_code

    def _on_sigterm(self) -> None:
        log.info("SIGTERM: cancelling reviews in flight")
        self.request_stop(SHUTDOWN_GRACE)

    async def _watch_parent(self, parent: int) -> None:
        while True:
            await asyncio.sleep(PARENT_POLL)
            if os.getppid() != parent:
                os.write(2, f"gated plugin: host process {parent} is gone; exiting\n".encode())
                os._exit(EXIT_HOST_GONE)


def _bind(server: grpc.aio.Server, creds: grpc.ServerCredentials) -> int:
    """Listen on loopback TCP, within PLUGIN_MIN_PORT..PLUGIN_MAX_PORT when
    the host sets a range, else on any free port."""
    try:
        lo = int(os.environ.get("PLUGIN_MIN_PORT", "0") or 0)
        hi = int(os.environ.get("PLUGIN_MAX_PORT", "0") or 0)
    except ValueError:
        lo = hi = 0
    if 0 < lo <= hi <= 65535:
        for port in range(lo, hi + 1):
            # A quiet look first: gRPC logs every port it fails to bind.
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            try:
                if server.add_secure_port(f"127.0.0.1:{port}", creds):
                    return port
            except RuntimeError:
                continue
        raise OSError(f"no free port from PLUGIN_MIN_PORT {lo} to PLUGIN_MAX_PORT {hi}")
    port = int(server.add_secure_port("127.0.0.1:0", creds))
    if port == 0:
        raise OSError("could not listen on 127.0.0.1")
    return port


class _ReviewerService(pb_grpc.ReviewerServicer):
    def __init__(self, plugin: _Plugin) -> None:
        self.p = plugin

    async def Describe(self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext) -> pb.DescribeResponse:
        try:
            d = await _call(self.p.reviewer.describe, self.p.pool)
            if not isinstance(d, Description):
                raise TypeError(f"describe returned {type(d).__name__}, want gated.plugin.Description")
            return pb.DescribeResponse(
                name=d.name,
                version=d.version,
                personas=list(d.personas),
                models=list(d.models),
                max_concurrency=max(int(d.max_concurrency), 0),
            )
        except Exception as e:  # noqa: BLE001 - every failure is this call's error
            log.exception("describe failed")
            status, msg = grpc.StatusCode.UNKNOWN, f"describe failed: {type(e).__name__}: {e}"
        await context.abort(status, msg)
        raise AssertionError("unreachable")

    async def Review(self, request: pb.ReviewRequest, context: grpc.aio.ServicerContext) -> pb.ReviewResponse:
        task = asyncio.current_task()
        assert task is not None
        p = self.p
        if p.stopping:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the plugin is shutting down")
        p.inflight[task] = None
        req: Request | None = None
        try:
            try:
                req = request_from_wire(request)
            except MalformedRequest as e:
                status, msg = grpc.StatusCode.INVALID_ARGUMENT, str(e)
            else:
                p.inflight[task] = req
                req._loop = asyncio.get_running_loop()
                md = dict(context.invocation_metadata() or ())
                req.traceparent, req.tracestate = _text(md.get("traceparent")), _text(md.get("tracestate"))
                if request.tool_host_broker_id:
                    req._call = p.broker.caller(request.tool_host_broker_id, req)
                remaining = req.deadline.timestamp() - time.time()
                tr = context.time_remaining()
                if tr is not None:
                    remaining = min(remaining, tr)
                try:
                    async with asyncio.timeout(max(remaining, 0)):
                        res = await _call(p.reviewer.review, p.pool, req)
                    return response_to_wire(res)
                except TimeoutError:
                    status, msg = grpc.StatusCode.DEADLINE_EXCEEDED, "the review passed its deadline"
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - every failure is this review's error
                    log.error("review %s failed", request.review_id, exc_info=True)
                    status, msg = grpc.StatusCode.UNKNOWN, f"reviewer failed: {type(e).__name__}: {e}"
        finally:
            if req is not None:
                req.cancelled.set()
            p.inflight.pop(task, None)
        await context.abort(status, msg)
        raise AssertionError("unreachable")


def _text(v: str | bytes | None) -> str | None:
    """A metadata value as text; None when absent or empty."""
    if isinstance(v, bytes):
        v = v.decode("ascii", "replace")
    return v or None


class _Controller(gp_grpc.GRPCControllerServicer):
    def __init__(self, plugin: _Plugin) -> None:
        self.p = plugin

    async def Shutdown(self, request: gp.Empty, context: grpc.aio.ServicerContext) -> gp.Empty:
        log.info("gated asked the plugin to shut down")
        # After this answer is out: go-plugin's own plugins stop at once.
        asyncio.get_running_loop().call_soon(self.p.request_stop, 0.0)
        return gp.Empty()


class _Broker(gp_grpc.GRPCBrokerServicer):
    """The plugin's end of go-plugin's broker: it learns where the host's
    brokered services listen and dials them with the plugin's certificate,
    trusting only the host's."""

    def __init__(self, plugin: _Plugin) -> None:
        self.p = plugin
        self.known: OrderedDict[int, tuple[str, str]] = OrderedDict()
        self.waiters: dict[int, list[asyncio.Future[None]]] = {}
        self.channels: dict[int, tuple[grpc.aio.Channel, pb_grpc.ToolHostStub]] = {}

    async def StartStream(self, request_iterator: AsyncIterator[gp.ConnInfo], context: grpc.aio.ServicerContext) -> None:
        async for info in request_iterator:
            self.learn(info)

    def learn(self, info: gp.ConnInfo) -> None:
        """Record one ConnInfo from the host. What gated never sends (a
        knock, an unknown network, an empty or oversized address, id 0)
        is logged and ignored."""
        if info.HasField("knock"):
            log.warning("broker: ignoring a multiplexing knock for service %d; this plugin does not multiplex", info.service_id)
            return
        if info.service_id == 0 or info.network not in ("unix", "tcp") or not info.address:
            log.warning("broker: ignoring connection info %r/%r for service %d", info.network[:32], info.address[:64], info.service_id)
            return
        if len(info.address.encode()) > MAX_ADDRESS_BYTES or "\x00" in info.address:
            log.warning("broker: ignoring an oversized or malformed address for service %d", info.service_id)
            return
        self.known[info.service_id] = (info.network, info.address)
        self.known.move_to_end(info.service_id)
        while len(self.known) > MAX_BROKERED:
            self.known.popitem(last=False)
        for fut in self.waiters.pop(info.service_id, []):
            if not fut.done():
                fut.set_result(None)

    async def stub(self, service_id: int, timeout: float) -> pb_grpc.ToolHostStub:
        """The ToolHost the host serves under service_id, dialed once."""
        if service_id in self.channels:
            return self.channels[service_id][1]
        if service_id not in self.known:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.setdefault(service_id, []).append(fut)
            try:
                await asyncio.wait_for(fut, timeout=max(min(timeout, BROKER_WAIT), 0))
            except TimeoutError:
                raise ToolFailed(f"gated never said where its tool service {service_id} listens") from None
            finally:
                waiting = self.waiters.get(service_id, [])
                if fut in waiting:
                    waiting.remove(fut)
                if not waiting:
                    self.waiters.pop(service_id, None)
        if service_id in self.channels:
            return self.channels[service_id][1]
        network, address = self.known[service_id]
        target = f"unix:{address}" if network == "unix" else address
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.p.client_pem,
            private_key=self.p.identity.key_pem,
            certificate_chain=self.p.identity.cert_pem,
        )
        ch = grpc.aio.secure_channel(
            target, creds, options=[*_CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", SERVER_NAME)]
        )
        stub = pb_grpc.ToolHostStub(ch)  # type: ignore[no-untyped-call]
        self.channels[service_id] = (ch, stub)
        return stub

    def caller(self, service_id: int, req: Request) -> Callable[[str, bytes], Awaitable[bytes]]:
        async def call(name: str, args: bytes) -> bytes:
            remaining = req.deadline.timestamp() - time.time()
            if remaining <= 0:
                raise ToolFailed(f"{name}: the review passed its deadline")
            stub = await self.stub(service_id, remaining)
            try:
                out = await stub.CallTool(
                    pb.CallToolRequest(review_id=req.review_id, name=name, args_json=args),
                    timeout=max(req.deadline.timestamp() - time.time(), 0.001),
                )
            except grpc.aio.AioRpcError as e:
                code = e.code()
                if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT):
                    raise ToolDenied(f"{name}: {e.details()}") from None
                raise ToolFailed(f"{name}: {code.name}: {e.details()}") from None
            return bytes(out.result_json)

        return call


class _Stdio(gp_grpc.GRPCStdioServicer):
    """What the plugin writes to its standard output after the handshake,
    for the host's stdio stream (gated reads it and drops it). The pipe is
    always drained, so a chatty reviewer never blocks on a full pipe."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.pending = 0
        self.dropped = 0

    def start(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        def pump() -> None:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                loop.call_soon_threadsafe(self._put, chunk)

        threading.Thread(target=pump, name="stdio", daemon=True).start()

    def _put(self, chunk: bytes) -> None:
        if self.pending + len(chunk) > MAX_STDIO_PENDING:
            self.dropped += len(chunk)
            return
        self.pending += len(chunk)
        self.queue.put_nowait(chunk)

    async def StreamStdio(self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext) -> AsyncIterator[gp.StdioData]:
        while True:
            chunk = await self.queue.get()
            self.pending -= len(chunk)
            yield gp.StdioData(channel=gp.StdioData.STDOUT, data=chunk)
