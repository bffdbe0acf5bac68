#!/usr/bin/env python3
"""A stand-in for E2B's control plane, as far as the network specs need it (spec/cli_network_spec.lua).

Prints "listening PORT" on stdout once ready. Keeps sandboxes in memory and records every request:
  POST /sandboxes                 201 {sandboxID: "sbx<n>", ...}; stores allow_internet_access and network
  GET  /v2/sandboxes              200 every sandbox
  GET  /sandboxes/{id}            200 the sandbox with network {allowOut, denyOut} and allowInternetAccess
  PUT  /sandboxes/{id}/network    204, replacing the rules (omitted fields cleared); an entry "refuse.me"
                                  gets the 400 sandboxd gives for a bad entry; an unknown id 404
  GET  /_requests                 every other request so far: [{method, path, body (parsed JSON or null)}]
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SANDBOXES = {}
REQUESTS = []


def view(sid):
    s = SANDBOXES[sid]
    return {"sandboxID": sid, "templateID": "base", "alias": "base", "clientID": "fake", "state": "running",
            "startedAt": "2025-01-01T00:00:00Z", "endAt": "2025-01-01T00:05:00Z", "cpuCount": 2,
            "memoryMB": 512, "diskSizeMB": 1024, "envdVersion": "0.2.0", "metadata": {},
            "allowInternetAccess": s["internet"],
            "network": {"allowOut": s["allowOut"], "denyOut": s["denyOut"]}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    def handle_any(self, method):
        body = self.body()
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if method == "GET" and parts == ["_requests"]:
            return self.reply(200, REQUESTS)
        REQUESTS.append({"method": method, "path": self.path, "body": body})
        if method == "GET" and parts == ["v2", "sandboxes"]:
            return self.reply(200, [view(sid) for sid in sorted(SANDBOXES)])
        if method == "POST" and parts == ["sandboxes"]:
            sid = "sbx%d" % (len(SANDBOXES) + 1)
            net = (body or {}).get("network") or {}
            SANDBOXES[sid] = {"internet": (body or {}).get("allow_internet_access", True),
                              "allowOut": net.get("allowOut", []), "denyOut": net.get("denyOut", [])}
            v = view(sid)
            v["envdAccessToken"] = "tok"
            return self.reply(201, v)
        if len(parts) >= 2 and parts[0] == "sandboxes":
            sid = parts[1]
            if sid not in SANDBOXES:
                return self.reply(404, {"code": 404, "message": "sandbox \"%s\" not found" % sid})
            if method == "GET" and len(parts) == 2:
                return self.reply(200, view(sid))
            if method == "PUT" and parts[2:] == ["network"]:
                b = body if isinstance(body, dict) else {}
                for i, e in enumerate(b.get("allowOut", [])):
                    if e == "refuse.me":
                        return self.reply(400, {"code": 400, "message": "allowOut[%d]: \"refuse.me\": refused by the fake" % i})
                SANDBOXES[sid] = {"internet": b.get("allow_internet_access", True),
                                  "allowOut": b.get("allowOut", []), "denyOut": b.get("denyOut", [])}
                return self.reply(204)
        self.reply(404, {"code": 404, "message": "no route %s %s" % (method, self.path)})

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
