#!/usr/bin/env python3
"""A stand-in for the world a sandbox's egress reaches, for tests and benchmarks (root only).

All traffic stays on this machine: a network namespace of its own joined to the host by a veth
pair, with host routes to three addresses inside it and nothing else:
  public     198.51.100.R (TEST-NET-2, never routed on the internet): HTTP :80, HTTPS :443 (a CA made
             here), a TCP service that speaks first :2222, UDP echo :9999, DNS :53 (dnsmasq)
  private    10.213.R.2 (a private range): HTTP :80, UDP echo :9999
  linklocal  169.254.R.7 (link-local, where clouds serve instance metadata): HTTP :80
DNS names (dnsmasq, on the public address): allowed.test, other.test, a.pkg.test, pkg.test → public;
rebind.test → private; meta.test → linklocal.

Every HTTP answer is `<which> <Host header>`; GET /bytes/N sends N bytes; GET /header/NAME?sha256=HEX
answers `header NAME match|mismatch|absent`: whether the request carried header NAME with the value
whose SHA-256 is HEX (never the value: a test of injected credentials). The test reads what the
servers saw from the host: GET http://PUBLIC:8099/stats → {"tcp": {"public:80": n, ...}, "udp": [...]}.

Usage: networld.py DIR [--until-signal]   prints one JSON line describing the world (addresses,
the CA's path), then runs until its stdin closes (or, with --until-signal, until SIGTERM), and
removes everything it made."""
import json, os, random, signal, socket, subprocess, sys, threading, time

SERVE = '--serve' in sys.argv


def sh(*args, check=True):
    return subprocess.run(args, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def die_with_parent():
    """In a child before exec: SIGKILL when networld dies, however it dies (its namespace goes then)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def make_pki(d, names, ips):
    """A CA and a server certificate for names and ips, signed by it (openssl)."""
    ca_key, ca, key, csr, crt, ext = (os.path.join(d, f) for f in ('ca.key', 'ca.pem', 'server.key', 'server.csr', 'server.pem', 'ext.cnf'))
    run = lambda *a: subprocess.run(a, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', ca_key, '-out', ca, '-days', '2', '-subj', '/CN=networld test CA')
    run('openssl', 'req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr, '-subj', '/CN=' + names[0])
    with open(ext, 'w') as f:
        f.write('subjectAltName=' + ','.join(['DNS:' + n for n in names] + ['IP:' + i for i in ips]) + '\n')
    run('openssl', 'x509', '-req', '-in', csr, '-CA', ca, '-CAkey', ca_key, '-CAcreateserial', '-out', crt, '-days', '2', '-extfile', ext)
    return ca, crt, key


# ---------------------------------------------------------------- inside the namespace: the servers
def serve(world):
    import http.server, socketserver, ssl
    stats = {'tcp': {}, 'udp': []}
    lock = threading.Lock()

    def count(key):
        with lock:
            stats['tcp'][key] = stats['tcp'].get(key, 0) + 1

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'
        disable_nagle_algorithm = True   # else every kept-alive answer waits out a delayed ACK
        def log_message(self, *a):
            pass
        def do_GET(self):
            if self.server.which == 'stats':
                body = json.dumps(stats).encode()
            elif self.path.startswith('/bytes/'):
                n = int(self.path[7:])
                self.send_response(200)
                self.send_header('Content-Length', str(n))
                self.end_headers()
                chunk = b'x' * 65536
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
                return
            elif self.path.startswith('/header/'):
                import hashlib
                name, _, q = self.path[len('/header/'):].partition('?')
                want = dict(p.split('=', 1) for p in q.split('&') if '=' in p).get('sha256', '')
                got = self.headers.get(name)
                verdict = 'absent' if got is None else (
                    'match' if hashlib.sha256(got.encode('latin-1')).hexdigest() == want else 'mismatch')
                body = f'header {name} {verdict}\n'.encode()
            else:
                body = f'{self.server.which} {self.headers.get("Host", "")}\n'.encode()
            self.send_response(200)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        def __init__(self, addr, which, tls=None):
            self.which, self.tls = which, tls
            super().__init__(addr, Handler)
        def server_bind(self):   # HTTPServer's own asks DNS for the address's name: none here
            socketserver.TCPServer.server_bind(self)
            self.server_name, self.server_port = self.server_address[:2]
        def get_request(self):
            conn, peer = super().get_request()
            count(f'{self.which}:{self.server_address[1]}')
            if self.tls:
                conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            return conn, peer

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(world['cert'], world['key'])
    servers = [Server((world['public'], 80), 'public'), Server((world['public'], 443), 'public', tls),
               Server((world['private'], 80), 'private'), Server((world['linklocal'], 80), 'linklocal'),
               Server((world['public'], 8099), 'stats')]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()

    def banner():   # speaks first; then echoes lines until the client closes
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((world['public'], 2222))
        ls.listen(64)
        while True:
            c, _ = ls.accept()
            count('public:2222')
            def one(c=c):
                try:
                    c.sendall(b'BANNER public\n')
                    while True:
                        d = c.recv(65536)
                        if not d:
                            break
                        c.sendall(d)
                except OSError:
                    pass
                c.close()
            threading.Thread(target=one, daemon=True).start()
    threading.Thread(target=banner, daemon=True).start()

    def udp(addr, which):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((addr, 9999))
        while True:
            d, src = u.recvfrom(65536)
            with lock:
                stats['udp'].append([which, src[0], d[:64].decode(errors='replace')])
            u.sendto(b'udp ' + which.encode() + b' ' + d, src)
    for a, w in ((world['public'], 'public'), (world['private'], 'private')):
        threading.Thread(target=udp, args=(a, w), daemon=True).start()
    print('serving', flush=True)
    while True:
        time.sleep(3600)


if SERVE:
    serve(json.loads(sys.argv[sys.argv.index('--serve') + 1]))
    sys.exit(0)

# ---------------------------------------------------------------- on the host: the namespace
if os.geteuid() != 0:
    print(json.dumps({'error': 'not root: cannot make a network namespace'}), flush=True)
    sys.exit(1)
d = sys.argv[1] if len(sys.argv) > 1 else '/tmp'
os.makedirs(d, exist_ok=True)
taken = subprocess.run(['ip', 'route'], capture_output=True, text=True).stdout
r = random.choice([n for n in range(2, 251) if f'198.51.100.{n} ' not in taken and f'10.213.{n}.' not in taken])
ns = f'mbw{os.getpid()}'
host_if, ns_if = f'{ns}h'[:15], f'{ns}n'[:15]
world = {'ns': ns, 'public': f'198.51.100.{r}', 'private': f'10.213.{r}.2', 'linklocal': f'169.254.{r}.7',
         'hostSide': f'10.214.{r}.1', 'dir': d,
         'names': {'allowed.test': 'public', 'other.test': 'public', 'a.pkg.test': 'public', 'pkg.test': 'public',
                   'rebind.test': 'private', 'meta.test': 'linklocal'}}
world['dns'] = world['public']
children = []


def cleanup(*_):
    for c in children:
        try:
            c.kill()
        except OSError:
            pass
    sh('ip', 'netns', 'del', ns, check=False)   # takes the veth pair, and the host routes with it
    sys.exit(0)


signal.signal(signal.SIGTERM, cleanup)
signal.signal(signal.SIGINT, cleanup)
try:
    ca, crt, key = make_pki(d, ['allowed.test', 'other.test', '*.pkg.test', 'pkg.test'], [world['public']])
    world.update(ca=ca, cert=crt, key=key)
    sh('ip', 'netns', 'add', ns)
    sh('ip', 'link', 'add', host_if, 'type', 'veth', 'peer', 'name', ns_if)
    sh('ip', 'link', 'set', ns_if, 'netns', ns)
    sh('ip', 'addr', 'add', world['hostSide'] + '/32', 'dev', host_if)
    sh('ip', 'link', 'set', host_if, 'up')
    inside = ('ip', 'netns', 'exec', ns)
    sh(*inside, 'ip', 'link', 'set', 'lo', 'up')
    sh(*inside, 'ip', 'link', 'set', ns_if, 'up')
    for a in ('public', 'private', 'linklocal'):
        sh(*inside, 'ip', 'addr', 'add', world[a] + '/32', 'dev', ns_if)
        sh('ip', 'route', 'add', world[a] + '/32', 'dev', host_if)
    sh(*inside, 'ip', 'route', 'add', world['hostSide'] + '/32', 'dev', ns_if)
    sh(*inside, 'ip', 'route', 'add', 'default', 'via', world['hostSide'], 'dev', ns_if, 'onlink')
    srv = subprocess.Popen([*inside, sys.executable, os.path.abspath(__file__), '--serve', json.dumps(world)],
                           stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    children.append(srv)
    if srv.stdout.readline().strip() != b'serving':
        raise RuntimeError('the servers did not start')
    dns = ['dnsmasq', '--keep-in-foreground', '--no-resolv', '--no-hosts', '--no-dhcp-interface=' + ns_if,
           '--listen-address=' + world['public'], '--bind-interfaces', '--pid-file=', '--user=root']
    for n, which in world['names'].items():
        dns.append(f'--address=/{n}/{world[which]}')
    children.append(subprocess.Popen([*inside, *dns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent))
    for _ in range(100):   # dnsmasq answers
        q = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        q.settimeout(0.1)
        try:
            q.sendto(bytes.fromhex('abcd01000001000000000000') + b'\x07allowed\x04test\x00\x00\x01\x00\x01', (world['dns'], 53))
            if q.recv(512)[:2] == b'\xab\xcd':
                break
        except OSError:
            time.sleep(0.05)
        finally:
            q.close()
    else:
        raise RuntimeError('dnsmasq does not answer')
except Exception as e:
    print(json.dumps({'error': f'{type(e).__name__}: {e}'}), flush=True)
    cleanup()
print(json.dumps(world), flush=True)
try:
    if '--until-signal' in sys.argv:
        while True:
            signal.pause()
    sys.stdin.read()   # until the test closes our stdin (or dies)
finally:
    cleanup()
