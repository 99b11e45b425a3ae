"""Optional TLS for the live channel, for clusters whose links between kernel and executors can be read.

Why pinning and not a CA: the kernel makes a fresh self-signed certificate for every run (its key never
leaves the kernel), and each rank gets that certificate and its SHA-256 fingerprint in the RunPlan. A rank
accepts that exact certificate and nothing else, so no trust store, CA or hostname is involved.

Certificates come from the ``cryptography`` package when it is importable, else from the ``openssl``
command; with neither, turning TLS on fails with what to install. Executors need neither: verifying
uses only the standard ``ssl`` module.

TLS runs over memory BIOs (``TLSStream``) rather than ``ssl.SSLSocket`` because the kernel reads a
connection on one thread while the supervisor writes to it on another, and one OpenSSL connection
must not be used by two threads at once.
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.contract import TLSPin
from ..core.errors import LaunchError

__all__ = [
    "TLS_CONF_KEY", "TLS_ENV", "SPARK_ENCRYPTION_KEYS", "TLSError", "TLSPin", "ServerIdentity",
    "make_identity", "server_context", "client_context", "TLSStream", "tls_requested",
    "spark_encryption_keys_on", "plaintext_warning",
]

TLS_CONF_KEY = "spark.jupyter_torchdist.channel.tls"
TLS_ENV = "JUPYTER_TORCHDIST_CHANNEL_TLS"
SPARK_ENCRYPTION_KEYS = ("spark.network.crypto.enabled", "spark.ssl.enabled")
VALID_DAYS = 30          # one run's certificate; only checked when a rank connects
_CHUNK = 1 << 20         # plaintext per TLS write, so a large value is not encrypted all at once
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class TLSError(LaunchError):
    """Channel TLS was asked for but cannot be set up; the message says what to install or set."""


@dataclass(frozen=True)
class ServerIdentity:
    """The kernel's certificate and private key for one run. Only ``pin()`` travels to the ranks."""
    cert_pem: str
    key_pem: str = field(repr=False)
    sha256: str = ""

    def pin(self) -> TLSPin:
        return TLSPin(self.cert_pem, self.sha256)


def _fingerprint(cert_pem: str) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_pem)).hexdigest()


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _identity_cryptography(host: str) -> ServerIdentity:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jupyter-torchdist channel")])
    san: Any = x509.IPAddress(ipaddress.ip_address(host)) if _is_ip(host) else x509.DNSName(host)
    now = datetime.datetime.now(datetime.timezone.utc)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName([san]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return ServerIdentity(cert_pem, key_pem, _fingerprint(cert_pem))


def _identity_openssl(host: str, openssl: str) -> ServerIdentity:
    san = f"IP:{host}" if _is_ip(host) else f"DNS:{host}"
    with tempfile.TemporaryDirectory(prefix="jtd-tls-") as tmp:  # mode 0700: the key is never readable by others
        key, cert = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
        cmd = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
               "-keyout", key, "-out", cert, "-days", str(VALID_DAYS), "-subj", "/CN=jupyter-torchdist channel",
               "-addext", f"subjectAltName={san}", "-addext", "extendedKeyUsage=serverAuth"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise TLSError(f"`openssl req` could not make the channel's certificate: {done.stderr.strip()[:500]}")
        with open(cert) as f:
            cert_pem = f.read()
        with open(key) as f:
            key_pem = f.read()
    return ServerIdentity(cert_pem, key_pem, _fingerprint(cert_pem))


def make_identity(host: str, *, backend: str | None = None) -> ServerIdentity:
    """A fresh certificate and key for one run. ``backend``: "cryptography", "openssl" or None (first found)."""
    if backend in (None, "cryptography"):
        try:
            return _identity_cryptography(host)
        except ImportError:
            if backend == "cryptography":
                raise TLSError("channel TLS: the `cryptography` package is not installed") from None
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TLSError(
            "channel TLS is on, but this kernel can make no certificate: install the `cryptography` package "
            f"(`pip install cryptography`) or the `openssl` command, or turn TLS off ({TLS_CONF_KEY}=false, "
            f"{TLS_ENV}=0)."
        )
    return _identity_openssl(host, openssl)


def server_context(identity: ServerIdentity) -> ssl.SSLContext:
    """TLS 1.2+ server context holding the run's key (loaded from a private temporary file, then removed)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="jtd-tls-") as tmp:
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        for path, text in ((cert, identity.cert_pem), (key, identity.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        ctx.load_cert_chain(cert, key)
    return ctx


def client_context(pin: TLSPin) -> ssl.SSLContext:
    """Trust exactly the pinned certificate (names do not matter: the certificate itself is pinned)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=pin.cert_pem)
    return ctx


class TLSStream:
    """A TLS connection over a plain socket that one thread may read while another writes.

    Offers what the channel uses of a socket: ``recv``, ``sendall``, ``fileno``, ``settimeout``,
    ``setsockopt``, ``getsockname``, ``shutdown``, ``close``; plus ``pending`` for buffered plaintext.
    """

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext, *, server_side: bool) -> None:
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=server_side)
        self._lock = threading.Lock()  # one OpenSSL object, one thread at a time; also keeps records in order
        self._plain = bytearray()       # decrypted, not yet returned (reader thread only)
        self._eof = False

    def _flush(self) -> None:
        out = self._out.read()
        if out:
            self.sock.sendall(out)

    def handshake(self) -> None:
        """Run the TLS handshake on the calling thread (the socket's timeout applies to each wait)."""
        while True:
            with self._lock:
                try:
                    self._obj.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
                self._flush()
            if done:
                return
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the peer closed the connection during the TLS handshake")
            with self._lock:
                self._in.write(data)

    def peer_sha256(self) -> str:
        der = self._obj.getpeercert(binary_form=True)
        return hashlib.sha256(der).hexdigest() if der else ""

    def check_pin(self, pin: TLSPin) -> None:
        """Refuse a peer whose certificate is not exactly the pinned one."""
        if not hmac.compare_digest(self.peer_sha256(), pin.sha256):
            raise ssl.SSLCertVerificationError("the kernel's TLS certificate is not the one pinned for this run")

    def recv(self, n: int) -> bytes:
        while not self._plain and not self._eof:
            with self._lock:
                try:
                    chunk = self._obj.read(65536)
                    if not chunk:
                        self._eof = True
                except ssl.SSLWantReadError:
                    chunk = b""
                except ssl.SSLZeroReturnError:
                    self._eof, chunk = True, b""
                self._flush()  # TLS 1.3 may answer while reading (session tickets, key updates)
            if chunk:
                self._plain += chunk
                break
            if self._eof:
                break
            data = self.sock.recv(65536)
            if not data:
                self._eof = True
                break
            with self._lock:
                self._in.write(data)
        out = bytes(self._plain[:n])
        del self._plain[:n]
        return out

    def decrypt(self, data: bytes) -> bytes | None:
        """The plaintext that ``data``, read off the socket by the caller (the channel's one reading loop), completes;
        None once the TLS session ended."""
        out = bytearray(self._plain)
        self._plain.clear()
        with self._lock:
            self._in.write(data)
            while True:
                try:
                    chunk = self._obj.read(65536)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    self._eof = True
                    break
                if not chunk:
                    self._eof = True
                    break
                out += chunk
            self._flush()  # TLS 1.3 may answer while reading (session tickets, key updates)
        return None if self._eof and not out else bytes(out)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        with self._lock:
            for start in range(0, len(view), _CHUNK):
                self._obj.write(view[start:start + _CHUNK])
                self._flush()

    def pending(self) -> int:
        return len(self._plain) + self._obj.pending()

    def fileno(self) -> int:
        return self.sock.fileno()

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def setsockopt(self, *args: Any) -> None:
        self.sock.setsockopt(*args)

    def getsockname(self) -> Any:
        return self.sock.getsockname()

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()


# -- settings -------------------------------------------------------------------------------------
ConfGet = Callable[[str], "str | None"]


def _flag(value: str, where: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise TLSError(f"{where}={value!r} is not a yes/no value: use true or false")


def tls_requested(conf_get: ConfGet) -> bool:
    """Channel TLS on? The environment variable wins over the Spark setting; off when neither is set."""
    env = os.environ.get(TLS_ENV)
    if env is not None and env.strip():
        return _flag(env, TLS_ENV)
    value = conf_get(TLS_CONF_KEY)
    return _flag(value, TLS_CONF_KEY) if value is not None else False


def spark_encryption_keys_on(conf_get: ConfGet) -> list[str]:
    """Which of Spark's own encryption settings are on."""
    return [key for key in SPARK_ENCRYPTION_KEYS if str(conf_get(key) or "").strip().lower() == "true"]


def plaintext_warning(conf_get: ConfGet, tls_on: bool) -> str | None:
    """A one-line warning when Spark encrypts its traffic but our channel would not; None otherwise."""
    keys = spark_encryption_keys_on(conf_get)
    if tls_on or not keys:
        return None
    return (f"Spark's own encryption is on ({', '.join(k + '=true' for k in keys)}) but the channel between "
            f"the ranks and this kernel (values, logs, tracebacks) is not encrypted: set {TLS_CONF_KEY}=true "
            f"on the SparkSession, or {TLS_ENV}=1 in the kernel's environment.")
