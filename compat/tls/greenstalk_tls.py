"""greenstalk (PyPI, 2.1.x) over TLS, through its public hook: a Client made on a
socket that is already connected (an ssl.SSLSocket). With TLS_TOKEN the socket sends
`auth <token>` first and reads AUTHENTICATED; with TLS_CERT/TLS_KEY it presents a
client certificate instead.

ROLE=producer: puts to `emails`, and is refused (FORBIDDEN, greenstalk's
UnknownResponseError) anything else; ROLE=worker: reserves from `emails` and deletes.
"""

import os
import socket
import ssl
import sys

import greenstalk


def fail(what):
    sys.exit(f"greenstalk over TLS: {what}")


def connect():
    host, port = os.environ["TLS_ADDR"].rsplit(":", 1)
    context = ssl.create_default_context(cafile=os.environ["TLS_CA"])
    if os.environ.get("TLS_CERT"):
        context.load_cert_chain(os.environ["TLS_CERT"], os.environ["TLS_KEY"])
    raw = socket.create_connection((host, int(port)), timeout=10)
    sock = context.wrap_socket(raw, server_hostname=host)
    token = os.environ.get("TLS_TOKEN")
    if token:
        sock.sendall(f"auth {token}\r\n".encode())
        answer = b""
        while not answer.endswith(b"\r\n"):
            chunk = sock.recv(1)
            if not chunk:
                fail("closed after auth")
            answer += chunk
        if answer != b"AUTHENTICATED\r\n":
            fail(f"auth answered {answer!r}")
    sock.settimeout(None)
    return sock


def refused(f, what):
    try:
        f()
    except greenstalk.UnknownResponseError as e:
        if e.status == b"FORBIDDEN":
            return
        fail(f"{what}: {e.status!r}")
    fail(f"{what} was not refused")


role = os.environ.get("ROLE")
if role == "producer":
    with greenstalk.Client(connect(), use="emails") as c:
        for body in ["five", "six"]:
            c.put(body, ttr=60)
        refused(lambda: c.use("billing"), "use billing")
        refused(lambda: c.stats(), "stats")
        c.put("seven", ttr=60)
elif role == "worker":
    with greenstalk.Client(connect(), watch="emails") as c:
        seen = []
        while True:
            try:
                job = c.reserve(timeout=1)
            except greenstalk.TimedOutError:
                break
            seen.append(job.body)
            c.delete(job)
        if seen != ["five", "six", "seven"]:
            fail(f"reserved {seen}")
        refused(lambda: c.peek_ready(), "peek-ready (used tube default)")
else:
    fail("ROLE must be producer or worker")
print(f"greenstalk over TLS as {role}: ok")
