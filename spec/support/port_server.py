#!/usr/bin/env python3
"""A server for the edge-mode tests to run inside a sandbox, behind sandboxd's port proxy
(test-only; Python's standard library has no WebSocket module, so the RFC 6455 handshake and
framing are written out here). One thread per connection, HTTP/1.1 keep-alive:

  GET/HEAD /big?n=N    N bytes (b"0123456789" repeated) in 64 KiB chunks, chunked encoding
  GET /headers         the request's method, target and headers as JSON (what the port saw)
  POST/PUT /sum        the body's length and SHA-256 as JSON (Content-Length or chunked bodies)
  GET + Upgrade: websocket
                       a WebSocket echo: every text or binary message comes back as it was
                       sent; a close is answered and the connection closed. The message "bye"
                       or "half" makes the server close first: a close frame, then it shuts
                       its sending half and reads on until the client's end; after "half" it
                       keeps the count of bytes that still arrived (GET /halfseen), so a test
                       can check that a half-closed tunnel still carries the other direction
  GET /halfseen        that count, as JSON
  POST /stall          reads nothing of the body and answers nothing until the client is gone
                       (a port that stops reading: the proxy must not buffer the upload)
  anything else        404

Prints "listening PORT" once ready.

usage: port_server.py PORT
"""
import base64
import hashlib
import json
import select
import socket
import struct
import sys
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
state = {"halfseen": 0}


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 65536 or not self.fill():
                return None
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        method, target, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
        return method, target, headers

    def exact(self, n):
        while len(self.buf) < n:
            if not self.fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self):
        while b"\r\n" not in self.buf:
            if not self.fill():
                return None
        out, self.buf = self.buf.split(b"\r\n", 1)
        return out

    def body(self, headers):
        h = {k.lower(): v for k, v in headers}
        if h.get("transfer-encoding", "").lower() == "chunked":
            out = hashlib.sha256()
            total = 0
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    self.line()
                    return total, out.hexdigest()
                data = self.exact(size)
                out.update(data)
                total += size
                self.line()
        n = int(h.get("content-length", "0"))
        out = hashlib.sha256()
        left = n
        while left:
            data = self.exact(min(left, 65536))
            out.update(data)
            left -= len(data)
        return n, out.hexdigest()


def reply(sock, status, body, ctype="application/json", extra=""):
    sock.sendall(("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n" % (status, ctype, len(body), extra)).encode()
                 + body)


def frame(opcode, payload):
    n = len(payload)
    if n < 126:
        hdr = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        hdr = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        hdr = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return hdr + payload


def websocket(c, key):
    accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    c.sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Accept: %s\r\nX-Echo: yes\r\n\r\n" % accept).encode())
    while True:
        h = c.exact(2)
        if h is None:
            return
        opcode, n = h[0] & 0x0F, h[1] & 0x7F
        if n == 126:
            n = struct.unpack("!H", c.exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", c.exact(8))[0]
        mask = c.exact(4) if h[1] & 0x80 else b""
        payload = c.exact(n)
        if payload is None:
            return
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        if opcode == 0x8:                      # close: answer it, then end
            c.sock.sendall(frame(0x8, payload[:2]))
            return
        if opcode == 0x9:                      # ping
            c.sock.sendall(frame(0xA, payload))
            continue
        if payload in (b"bye", b"half"):
            c.sock.sendall(frame(0x8, struct.pack("!H", 1000)))
            c.sock.shutdown(socket.SHUT_WR)
            seen = len(c.buf)
            c.buf = b""
            while True:
                chunk = c.sock.recv(65536)
                if not chunk:
                    break
                seen += len(chunk)
            if payload == b"half":
                state["halfseen"] = seen
            return
        c.sock.sendall(frame(opcode, payload))


def serve(sock):
    c = Conn(sock)
    try:
        while True:
            req = c.head()
            if req is None:
                return
            method, target, headers = req
            h = {k.lower(): v for k, v in headers}
            path, _, query = target.partition("?")
            if h.get("upgrade", "").lower() == "websocket" and h.get("sec-websocket-key"):
                websocket(c, h["sec-websocket-key"])
                return
            if path == "/big" and method in ("GET", "HEAD"):
                n = int(dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("n", "0"))
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                if method == "GET":
                    chunk = b"0123456789" * 6554
                    left = n
                    while left:
                        k = min(left, 65536)
                        sock.sendall(b"%x\r\n" % k + chunk[:k] + b"\r\n")
                        left -= k
                sock.sendall(b"0\r\n\r\n")
            elif path == "/headers":
                reply(sock, "200 OK", json.dumps({"method": method, "target": target, "headers": headers}).encode())
            elif path == "/sum" and method in ("POST", "PUT"):
                n, digest = c.body(headers)
                reply(sock, "200 OK", json.dumps({"length": n, "sha256": digest}).encode())
            elif path == "/stall":
                p = select.poll()              # the client's end, without reading the body
                p.register(sock, select.POLLRDHUP)
                while not p.poll(500):
                    pass
                return
            elif path == "/halfseen":
                reply(sock, "200 OK", json.dumps({"seen": state["halfseen"]}).encode())
            else:
                c.body(headers)
                reply(sock, "404 Not Found", b"no such path\n", "text/plain")
    except (OSError, ValueError):
        pass
    finally:
        sock.close()


def main():
    port = int(sys.argv[1])
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)
    print("listening %d" % port, flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
