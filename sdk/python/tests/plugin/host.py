"""A stand-in for a misbehaving or hostile host: it launches a Python
plugin the way go-plugin does and then speaks the protocol, or garbage,
with Python's gRPC. gated itself is tested through the real binary; this
peer only plays the other side of the wire."""

from __future__ import annotations

import base64
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gated.plugin._tls import Identity, new_identity

from pluginkit import write_plugin


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    line: str
    addr: str
    server_pem: bytes
    host: Identity
    channels: list[grpc.Channel] = field(default_factory=list)

    def channel(self, ident: Identity | None = None, plaintext: bool = False) -> grpc.Channel:
        if plaintext:
            ch = grpc.insecure_channel(self.addr)
        else:
            ident = ident or self.host
            creds = grpc.ssl_channel_credentials(
                root_certificates=self.server_pem, private_key=ident.key_pem, certificate_chain=ident.cert_pem
            )
            ch = grpc.secure_channel(self.addr, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        self.channels.append(ch)
        return ch

    def close(self) -> None:
        for ch in self.channels:
            ch.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def host_env(host: Identity, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GATED_PLUGIN": "reviewer",
        "PLUGIN_PROTOCOL_VERSIONS": "1",
        "PLUGIN_MIN_PORT": "10000",
        "PLUGIN_MAX_PORT": "25000",
        "PLUGIN_CLIENT_CERT": host.cert_pem.decode(),
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def launch(tmp: Path, mode: str, **extra: str) -> Launched:
    plugin = write_plugin(tmp / mode, mode)
    host = new_identity()
    proc = subprocess.Popen([str(plugin)], env=host_env(host, **extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().rstrip("\n")
    parts = line.split("|")
    if len(parts) < 6:
        proc.kill()
        raise AssertionError(f"handshake line {line!r}; stderr {proc.communicate()[1][-2000:]!r}")
    der = base64.b64decode(parts[5] + "=" * (-len(parts[5]) % 4))
    pem = x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)
    return Launched(proc, line, parts[3], pem, host)

