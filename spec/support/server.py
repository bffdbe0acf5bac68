#!/usr/bin/env python3
"""Test HTTP/1.1 server for the transport specs and the unary benchmark.

Prints "listening PORT" on stdout once ready; exits non-zero if it cannot start.
Endpoints (query parameters in brackets):
  /ping                      "ok"
  /echo [raw=1]              JSON {method, path, headers, body_len, client_port}; raw=1 echoes the body
  /big [n]                   n bytes of 'x' with Content-Length
  /stream [chunks,size,delay_ms]  chunked body: chunk i is `size` bytes of chr(65 + i % 26)
  /close [after,promise]     promises `promise` bytes, sends `after`, then closes the connection
  /delay [ms]                sleeps, then "ok"
  /hang                      headers and one chunk, then holds the connection open (60 s)
  /status [code]             empty body with that status
  /headers [n]               n extra 100-byte response headers
  /replay [status,chunk,delay_ms,cut,repeat]  the request body sent back chunked (`chunk` bytes
                             per chunk, `delay_ms` between them, `repeat` times over); `cut`:
                             close the connection after that many body bytes, mid-stream
"""
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes

    def log_message(self, *args):
        pass

    def q(self, name, default):
        v = self.query.get(name)
        return int(v[0]) if v else default

    def send_body(self, status, body, ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def handle_any(self):
        u = urlparse(self.path)
        self.query = parse_qs(u.query)
        body = self.read_body()
        p = u.path
        if p == "/ping":
            self.send_body(200, b"ok")
        elif p == "/echo":
            if self.q("raw", 0):
                self.send_body(200, body, "application/octet-stream")
                return
            doc = {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_len": len(body),
                "client_port": self.client_address[1],
            }
            self.send_body(200, json.dumps(doc).encode(), "application/json")
        elif p == "/big":
            self.send_body(200, b"x" * self.q("n", 1024))
        elif p == "/stream":
            chunks, size, delay = self.q("chunks", 10), self.q("size", 1024), self.q("delay_ms", 0)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(chunks):
                data = bytes([65 + i % 26]) * size
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if delay:
                    time.sleep(delay / 1000)
            self.wfile.write(b"0\r\n\r\n")
        elif p == "/close":
            after, promise = self.q("after", 10), self.q("promise", 1000)
            self.send_response(200)
            self.send_header("Content-Length", str(promise))
            self.end_headers()
            self.wfile.write(b"y" * after)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif p == "/delay":
            time.sleep(self.q("ms", 100) / 1000)
            self.send_body(200, b"ok")
        elif p == "/hang":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n")
            self.wfile.flush()
            time.sleep(60)
        elif p == "/headers":
            self.send_response(200)
            for i in range(self.q("n", 10)):
                self.send_header("X-Filler-%d" % i, "f" * 100)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        elif p == "/replay":
            status, chunk = self.q("status", 200), max(1, self.q("chunk", 65536))
            delay, cut, repeat = self.q("delay_ms", 0), self.q("cut", -1), self.q("repeat", 1)
            self.send_response(status)
            self.send_header("Content-Type", "application/connect+json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            for _ in range(repeat):
                for off in range(0, len(body), chunk):
                    data = body[off:off + chunk]
                    if cut >= 0 and sent + len(data) > cut:
                        data = data[:cut - sent]
                        if data:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    sent += len(data)
                    if delay:
                        time.sleep(delay / 1000)
            self.wfile.write(b"0\r\n\r\n")
        elif p == "/status":
            self.send_body(self.q("code", 200), b"")
        else:
            self.send_body(404, b"not found")

    do_GET = do_POST = do_PUT = do_DELETE = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # The specs open dozens of connections at once; the default backlog of 5 dropped SYNs and
    # each retry cost a second (50 streams took 8 s instead of 0.2 s).
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # Clients that abort on purpose (limits, cancel) are part of the tests.
        if isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def exit_with_parent():
    # A test run that is killed never reaches its teardown: do not outlive it.
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main():
    threading.Thread(target=exit_with_parent, daemon=True).start()
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = Server(("127.0.0.1", port), Handler)
    print("listening %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
