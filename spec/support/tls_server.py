#!/usr/bin/env python3
"""A TLS endpoint for spec/tls_spec.lua: answers every request with 200 and a JSON body that
echoes the Host header and the path (as the E2B control plane's list answers `[]` when the path
is /v2/sandboxes). Prints "listening PORT" once ready.

usage: tls_server.py CERT KEY
"""
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path.startswith("/v2/sandboxes"):
            body = b"[]"
        else:
            body = json.dumps({"host": self.headers.get("Host"), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Seen-Host", self.headers.get("Host") or "")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def handle_error(self, request, client_address):
        pass   # clients that refuse the certificate hang up: that is what the spec checks


def main():
    cert, key = sys.argv[1], sys.argv[2]
    srv = Server(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("listening %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
