#!/usr/bin/env python3
"""A stand-in for E2B's control plane, as far as the network and secret specs need it
(spec/cli_network_spec.lua, spec/secrets_spec.lua).

Prints "listening PORT" on stdout once ready. Keeps sandboxes and secrets in memory and records every
request:
  POST /sandboxes                 201 {sandboxID: "sbx<n>", ...}; stores allow_internet_access and network
                                  (allowOut, denyOut, rules, allowPublicTraffic); allowPublicTraffic false
                                  gives a trafficAccessToken "tat-<id>" (in this answer and connect's only,
                                  as E2B and sandboxd: getInfo has none)
  POST /sandboxes/{id}/connect    200 the sandbox, with its trafficAccessToken
  GET  /v2/sandboxes              200 every sandbox
  GET  /sandboxes/{id}            200 the sandbox with network {allowOut, denyOut, rules?, allowPublicTraffic?}
  PUT  /sandboxes/{id}/network    204, replacing the rules (omitted fields cleared); an entry "refuse.me"
                                  gets the 400 sandboxd gives for a bad entry; an unknown id 404
  DELETE /sandboxes/{id}          204, and the secrets whose metadata "sandboxd.sandbox" names it go too
  POST /secrets                   201 {secretID, name (lower-cased), currentVersion 1, metadata, ...}; a name
                                  with '{' or '}' 400; a name in use 409. The value is kept, never returned
  GET  /secrets[?limit&nextToken] 200 a page (x-next-token when more), sorted by name
  GET|POST|DELETE /secrets/{name} 200 info | 200 a new version | 204; an unknown name 404
  GET  /_requests                 every other request so far: [{method, path, body (parsed JSON or null)}]
  GET  /_secrets                  every secret's name and value (the spec checks what was sent)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SANDBOXES = {}
REQUESTS = []
SECRETS = {}
SERIAL = [0]


def view(sid):
    s = SANDBOXES[sid]
    v = {"sandboxID": sid, "templateID": "base", "alias": "base", "clientID": "fake", "state": "running",
         "startedAt": "2025-01-01T00:00:00Z", "endAt": "2025-01-01T00:05:00Z", "cpuCount": 2,
         "memoryMB": 512, "diskSizeMB": 1024, "envdVersion": "0.2.0", "metadata": {},
         "allowInternetAccess": s["internet"],
         "network": {"allowOut": s["allowOut"], "denyOut": s["denyOut"]}}
    if s.get("rules"):
        v["network"]["rules"] = s["rules"]
    if s.get("public") is not None:
        v["network"]["allowPublicTraffic"] = s["public"]
    return v


def secret_view(s):
    return {k: s[k] for k in ("secretID", "name", "currentVersion", "metadata", "createdAt", "updatedAt")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj=None, headers=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
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
        if method == "GET" and parts == ["_secrets"]:
            return self.reply(200, {n: x["value"] for n, x in SECRETS.items()})
        REQUESTS.append({"method": method, "path": self.path, "body": body})
        if method == "GET" and parts == ["v2", "sandboxes"]:
            return self.reply(200, [view(sid) for sid in sorted(SANDBOXES)])
        if method == "POST" and parts == ["sandboxes"]:
            sid = "sbx%d" % (len(SANDBOXES) + 1)
            net = (body or {}).get("network") or {}
            public = net.get("allowPublicTraffic")
            SANDBOXES[sid] = {"internet": (body or {}).get("allow_internet_access", True),
                              "allowOut": net.get("allowOut", []), "denyOut": net.get("denyOut", []),
                              "rules": net.get("rules"), "public": public,
                              "token": ("tat-" + sid) if public is False else None}
            v = view(sid)
            v["envdAccessToken"] = "tok"
            v["trafficAccessToken"] = SANDBOXES[sid]["token"]
            return self.reply(201, v)
        if parts[:1] == ["secrets"]:
            return self.secrets(method, parts[1:], body)
        if len(parts) >= 2 and parts[0] == "sandboxes":
            sid = parts[1]
            if sid not in SANDBOXES:
                return self.reply(404, {"code": 404, "message": "sandbox \"%s\" not found" % sid})
            if method == "GET" and len(parts) == 2:
                return self.reply(200, view(sid))
            if method == "POST" and parts[2:] == ["connect"]:
                v = view(sid)
                v["envdAccessToken"] = "tok"
                v["trafficAccessToken"] = SANDBOXES[sid]["token"]
                return self.reply(200, v)
            if method == "DELETE" and len(parts) == 2:
                del SANDBOXES[sid]
                for name in [n for n, x in SECRETS.items() if x["metadata"].get("sandboxd.sandbox") == sid]:
                    del SECRETS[name]
                return self.reply(204)
            if method == "PUT" and parts[2:] == ["network"]:
                b = body if isinstance(body, dict) else {}
                for i, e in enumerate(b.get("allowOut", [])):
                    if e == "refuse.me":
                        return self.reply(400, {"code": 400, "message": "allowOut[%d]: \"refuse.me\": refused by the fake" % i})
                old = SANDBOXES[sid]
                SANDBOXES[sid] = {"internet": b.get("allow_internet_access", True),
                                  "allowOut": b.get("allowOut", []), "denyOut": b.get("denyOut", []),
                                  "rules": b.get("rules"), "public": old.get("public"), "token": old.get("token")}
                return self.reply(204)
        self.reply(404, {"code": 404, "message": "no route %s %s" % (method, self.path)})

    def secrets(self, method, rest, body):
        b = body if isinstance(body, dict) else {}
        now = "2025-01-01T00:00:%02dZ" % (SERIAL[0] % 60)
        SERIAL[0] += 1
        if not rest:
            if method == "GET":
                q = dict(p.split("=", 1) for p in (self.path.split("?", 1) + [""])[1].split("&") if "=" in p)
                limit, start = int(q.get("limit", 100)), int(q.get("nextToken", 0))
                names = sorted(SECRETS)
                page = [secret_view(SECRETS[n]) for n in names[start:start + limit]]
                headers = {"X-Next-Token": str(start + limit)} if start + limit < len(names) else {}
                return self.reply(200, page, headers)
            if method == "POST":
                name = str(b.get("name", ""))
                if not name or "{" in name or "}" in name or not isinstance(b.get("value"), str):
                    return self.reply(400, {"code": 400, "message": "invalid secret"})
                name = name.lower()
                if name in SECRETS:
                    return self.reply(409, {"code": 409, "message": "secret \"%s\" already exists" % name})
                SECRETS[name] = {"secretID": "sec_%d" % SERIAL[0], "name": name, "currentVersion": 1,
                                 "metadata": b.get("metadata") or {}, "createdAt": now, "updatedAt": now,
                                 "value": b["value"]}
                return self.reply(201, secret_view(SECRETS[name]))
        else:
            name = rest[0].lower()
            s = SECRETS.get(name) or next((x for x in SECRETS.values() if x["secretID"] == rest[0]), None)
            if s is None:
                return self.reply(404, {"code": 404, "message": "secret \"%s\" not found" % rest[0]})
            if method == "GET":
                return self.reply(200, secret_view(s))
            if method == "POST":
                s["value"], s["currentVersion"], s["updatedAt"] = b.get("value"), s["currentVersion"] + 1, now
                if b.get("metadata") is not None:
                    s["metadata"] = b["metadata"]
                return self.reply(200, secret_view(s))
            if method == "DELETE":
                del SECRETS[s["name"]]
                return self.reply(204)
        self.reply(404, {"code": 404, "message": "no route %s %s" % (method, self.path)})

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")


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
