// Egress rules (issue 17): E2B's network options enforced outside the sandbox, sandboxd's safe
// defaults, rules changed live, and root inside trying to get around them. Every packet goes to
// the stand-in world of spec/support/networld.py (a network namespace this file makes: a public-
// looking host on TEST-NET-2, a private one, a link-local one, a DNS server for *.test names);
// the file's own sandboxd sends the sandboxes' DNS there (--dns).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { T, Sandbox, startSandboxd, stopSandboxd, startNetworld, sh, uniq, waitFor } from './helpers.mjs'

let world, srv, why
before(async () => {
  world = await startNetworld()
  if (world.why) { why = world.why; return }
  srv = await startSandboxd({ args: ['--dns', world.dns], env: { SANDBOXD_TRACE_EGRESS: '1' } })
}, { timeout: 60_000 })
after(async () => {
  await stopSandboxd(srv)
  if (world?.stop) await world.stop()
})

/** A sandbox of the file's sandboxd, with the probe and the world's CA in it; killed after t. */
async function box(t, opts = {}) {
  const sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 180_000, metadata: { test: uniq('eg') }, ...opts })
  t.after(() => sbx.kill().catch(() => {}))
  await sbx.files.write('/tmp/probe.py', PROBE)
  await sbx.files.write('/tmp/ca.pem', await (await import('node:fs/promises')).readFile(world.ca, 'utf8'))
  return sbx
}

/* Each probe in its own thread, 3 s each; the result is "ok:<first line of the answer>" or the
 * error's class ("ConnectionResetError": the proxy refused a connection it had to accept first). */
const PROBE = String.raw`
import json, socket, ssl, sys, concurrent.futures as cf
def tcp(host, port, send=b'', name=None, tls=False):   # with send: a request, read to the end
    s = socket.create_connection((host, port), timeout=3)
    try:
        if tls:
            ctx = ssl.create_default_context(cafile='/tmp/ca.pem')
            ctx.check_hostname = False
            s = ctx.wrap_socket(s, server_hostname=name)
        if send:
            s.sendall(send)
        data = b''
        while send or b'\n' not in data:
            d = s.recv(4096)
            if not d:
                break
            data += d
        if not data:
            return 'EOF'
        return 'ok:' + data.split(b'\r\n\r\n')[-1].decode(errors='replace').strip().split('\n')[0]
    finally:
        s.close()
def one(p):
    try:
        k = p[0]
        if k == 'http':      # http, address, port, Host
            return tcp(p[1], p[2], ('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % p[3]).encode())
        if k == 'https':     # https, address, port, SNI (and Host)
            return tcp(p[1], p[2], ('GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' % p[3]).encode(), p[3], True)
        if k == 'tcp':       # a service that speaks first
            return tcp(p[1], p[2])
        if k == 'udp':
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
            u.sendto(p[3].encode(), (p[1], p[2]))
            return 'ok:' + u.recv(4096).decode(errors='replace')
        if k == 'dns':
            return 'ok:' + socket.gethostbyname(p[1])
    except Exception as e:
        return type(e).__name__
probes = json.loads(sys.argv[1])
with cf.ThreadPoolExecutor(len(probes)) as ex:
    print(json.dumps(list(ex.map(one, probes))))
`

/** Runs probes (a list of arrays, see PROBE) inside sbx; their results in order. */
async function probe(sbx, probes, opts = {}) {
  const arg = JSON.stringify(probes).replace(/'/g, "'\\''")
  const r = await sh(sbx, `python3 /tmp/probe.py '${arg}'`, { timeoutMs: 30_000, ...opts })
  assert.equal(r.code, 0, r.out)
  return JSON.parse(r.out.trim().split('\n').pop())
}

const refused = (v) => !String(v).startsWith('ok:')
const skipped = (t) => (why ? t.skip(why) : false)

test('no network options: the public world answers (HTTP, HTTPS, a server-first service, UDP, DNS); link-local and private hosts do not', T, async (t) => {
  if (skipped(t)) return
  const s = await box(t)
  const w = world
  const before = (await w.stats()).tcp
  const r = await probe(s, [
    ['http', w.public, 80, 'allowed.test'], ['https', w.public, 443, 'allowed.test'], ['tcp', w.public, 2222],
    ['udp', w.public, 9999, 'hello'], ['dns', 'allowed.test'], ['http', 'other.test', 80, 'other.test'],
    ['http', w.linklocal, 80, 'meta.test'], ['http', w.private, 80, 'x'], ['udp', w.private, 9999, 'x'], ['http', 'meta.test', 80, 'meta.test'],
  ])
  assert.deepEqual(r.slice(0, 6), ['ok:public allowed.test', 'ok:public allowed.test', 'ok:BANNER public', 'ok:udp public hello',
    `ok:${w.public}`, 'ok:public other.test'])
  for (const v of r.slice(6)) assert.ok(refused(v), `link-local/private reached: ${JSON.stringify(r)}`)
  const after = (await w.stats()).tcp
  assert.equal(after['linklocal:80'] ?? 0, before['linklocal:80'] ?? 0, 'the link-local host saw a connection')
  assert.equal(after['private:80'] ?? 0, before['private:80'] ?? 0, 'the private host saw a connection')
  assert.ok(!(await w.stats()).udp.some(([which]) => which === 'private'), 'the private host saw a datagram')
  assert.equal((await s.getInfo()).allowInternetAccess, true)
})

test('allowOut names with denyOut 0.0.0.0/0: a name decides TCP 80/443 by what the connection says (Host, SNI), whatever address it dialled; nothing else gets out', T, async (t) => {
  if (skipped(t)) return
  const s = await box(t, { network: { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] } })
  const w = world
  const r = await probe(s, [
    ['http', 'allowed.test', 80, 'allowed.test'], ['https', 'allowed.test', 443, 'allowed.test'],
    // the name decides, not the address: a lie about the address still reaches allowed.test itself
    ['http', '203.0.113.9', 80, 'allowed.test'], ['https', '203.0.113.9', 443, 'allowed.test'],
    ['http', w.public, 80, 'other.test'], ['https', w.public, 443, 'other.test'], ['http', w.public, 80, w.public],
    ['tcp', w.public, 2222], ['udp', w.public, 9999, 'x'], ['http', w.public, 8099, 'allowed.test'],
    ['dns', 'allowed.test'], ['dns', 'other.test'],
  ])
  assert.deepEqual(r.slice(0, 4), ['ok:public allowed.test', 'ok:public allowed.test', 'ok:public allowed.test', 'ok:public allowed.test'], JSON.stringify(r))
  for (const v of r.slice(4, 10)) assert.ok(refused(v), `denied destination reached: ${JSON.stringify(r)}`)
  assert.equal(r[10], `ok:${w.public}`, 'allowed names resolve')
  assert.equal(r[11], 'gaierror', 'a name the rules never allow does not even resolve (no DNS leak)')
  const net = (await s.getInfo()).network
  if (net) assert.deepEqual({ allowOut: net.allowOut, denyOut: net.denyOut }, { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] })
})

test('a wildcard allows subdomains at any depth, never the apex; addresses and CIDRs allow every port and UDP', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const s = await box(t, { network: { allowOut: ['*.pkg.test', `${w.public}/32`], denyOut: ['0.0.0.0/0'] } })
  const r = await probe(s, [['dns', 'a.pkg.test'], ['dns', 'pkg.test'], ['tcp', w.public, 2222], ['udp', w.public, 9999, 'y']])
  assert.deepEqual(r, [`ok:${w.public}`, 'gaierror', 'ok:BANNER public', 'ok:udp public y'])
  const n = await box(t, { network: { allowOut: ['*.pkg.test'], denyOut: ['0.0.0.0/0'] } })
  const r2 = await probe(n, [['https', w.public, 443, 'a.pkg.test'], ['https', w.public, 443, 'pkg.test'], ['tcp', w.public, 2222]])
  assert.equal(r2[0], 'ok:public a.pkg.test')
  assert.ok(refused(r2[1]) && refused(r2[2]), JSON.stringify(r2))
})

test('private ranges: reached only when allowOut names them; 0.0.0.0/0 does not, nor a name that resolves there (DNS rebinding)', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const named = await box(t, { network: { allowOut: [w.private.replace(/\.2$/, '.0/24')] } })
  assert.deepEqual(await probe(named, [['http', w.private, 80, 'x'], ['udp', w.private, 9999, 'z']]), ['ok:private x', 'ok:udp private z'])
  const all = await box(t, { network: { allowOut: ['0.0.0.0/0'] } })
  assert.ok(refused((await probe(all, [['http', w.private, 80, 'x']]))[0]))
  const rebind = await box(t, { network: { allowOut: ['rebind.test'], denyOut: ['0.0.0.0/0'] } })
  const r = await probe(rebind, [['dns', 'rebind.test'], ['http', w.public, 80, 'rebind.test'], ['http', w.private, 80, 'rebind.test']])
  assert.equal(r[0], `ok:${w.private}`, 'the name resolves (DNS is no boundary)')
  assert.ok(refused(r[1]) && refused(r[2]), `a name led into a private range: ${JSON.stringify(r)}`)
})

test('link-local is refused whatever allowOut says, unless sandboxd runs with --egress-unblock link-local', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const ll = w.linklocal
  const s = await box(t, { network: { allowOut: [ll, 'meta.test', '169.254.0.0/16'] } })
  const r = await probe(s, [['http', ll, 80, 'meta.test'], ['http', 'meta.test', 80, 'meta.test']])
  assert.ok(r.every(refused), JSON.stringify(r))
  const open = await startSandboxd({ args: ['--dns', w.dns, '--egress-unblock', 'link-local'] })
  t.after(() => stopSandboxd(open))
  const o = await Sandbox.create('base', { ...open.opts, timeoutMs: 60_000 })
  t.after(() => o.kill().catch(() => {}))
  await o.files.write('/tmp/probe.py', PROBE)
  assert.deepEqual(await probe(o, [['http', ll, 80, 'meta.test']]), ['ok:linklocal meta.test'])
  // a bad flag is a usage error naming it
  const bad = await startSandboxd({ args: ['--egress-unblock', '8.8.8.0/24'] }).catch((e) => e)
  assert.match(String(bad), /--egress-unblock "8\.8\.8\.0\/24": only private, shared or link-local ranges/)
})

test('allowInternetAccess false: no connection, datagram or DNS answer gets out; an allowOut entry still does (as on E2B)', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const off = await box(t, { allowInternetAccess: false })
  const r = await probe(off, [['http', w.public, 80, 'allowed.test'], ['udp', w.public, 9999, 'q'], ['dns', 'allowed.test'], ['tcp', w.public, 2222]])
  assert.ok(r.every(refused), JSON.stringify(r))
  const info = await off.getInfo()
  assert.equal(info.allowInternetAccess, false)
  if (info.network) assert.deepEqual(info.network.denyOut, ['0.0.0.0/0'])
  const hole = await box(t, { allowInternetAccess: false, network: { allowOut: [w.public] } })
  const r2 = await probe(hole, [['tcp', w.public, 2222], ['dns', 'allowed.test']])
  assert.equal(r2[0], 'ok:BANNER public')
  assert.equal(r2[1], 'gaierror')
})

test('updateNetwork replaces every rule at once: what opens after it is decided by the new rules, and open connections they deny are reset', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const s = await box(t)
  // a long-lived connection to the server-first service, held by a background process
  await s.files.write('/tmp/hold.py', String.raw`
import socket, sys, time
c = socket.create_connection(('${w.public}', 2222)); c.settimeout(30)
out = open('/tmp/hold.log', 'w', buffering=1)
out.write(c.recv(100).decode())
for i in range(300):
    try:
        c.sendall(b'tick %d\n' % i); d = c.recv(100)
        if not d: out.write('EOF\n'); break
        out.write(d.decode())
    except Exception as e:
        out.write(type(e).__name__ + '\n'); break
    time.sleep(0.1)
`)
  await s.commands.run('python3 /tmp/hold.py', { background: true })
  await waitFor(async () => (await s.files.read('/tmp/hold.log')).includes('tick 2'), { what: 'the held connection to work' })
  await s.updateNetwork({ allowOut: ['allowed.test'], denyOut: [`${w.public}/32`] })
  // the update returned: the held connection is gone, without waiting for anything
  const log = await s.files.read('/tmp/hold.log')
  await waitFor(async () => /ConnectionResetError|EOF|BrokenPipeError/.test(await s.files.read('/tmp/hold.log')), { timeoutMs: 5000, what: 'the held connection to see its reset' })
  assert.match(log + (await s.files.read('/tmp/hold.log')), /BANNER public/)
  const r = await probe(s, [['tcp', w.public, 2222], ['http', w.public, 80, 'allowed.test'], ['http', w.public, 80, 'other.test']])
  assert.ok(refused(r[0]) && refused(r[2]), JSON.stringify(r))
  assert.equal(r[1], 'ok:public allowed.test')
  const info = await s.getInfo()
  if (info.network) assert.deepEqual({ allowOut: info.network.allowOut, denyOut: info.network.denyOut }, { allowOut: ['allowed.test'], denyOut: [`${w.public}/32`] })
  // omitted fields are cleared: everything again
  await s.updateNetwork({})
  assert.equal((await probe(s, [['tcp', w.public, 2222]]))[0], 'ok:BANNER public')
  // and off, as allowInternetAccess false
  await s.updateNetwork({ allowInternetAccess: false })
  assert.ok(refused((await probe(s, [['tcp', w.public, 2222]]))[0]))
  assert.equal((await s.getInfo()).allowInternetAccess, false)
})

test('bulk both ways at once arrives whole: 24 MiB echoed back through the proxy (backpressure, half-close)', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const s = await box(t)
  const r = await sh(s, `python3 -c "
import hashlib, os, socket, threading
data = os.urandom(24 << 20)
c = socket.create_connection(('${w.public}', 2222), timeout=60)
assert c.recv(14) == b'BANNER public\\n'
def send():
    c.sendall(data); c.shutdown(socket.SHUT_WR)
threading.Thread(target=send).start()
got = hashlib.sha256(); n = 0
while True:
    d = c.recv(1 << 20)
    if not d: break
    got.update(d); n += len(d)
print(n, got.hexdigest() == hashlib.sha256(data).hexdigest())
"`, { timeoutMs: 120_000 })
  assert.equal(r.out.trim(), `${24 << 20} True`, r.out)
})

test('a fork keeps its source\'s rules as they are in force (an update included)', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const src = await box(t, { network: { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] } })
  await src.updateNetwork({ allowOut: [w.public], denyOut: ['0.0.0.0/0'] })
  const res = await fetch(`${srv.url}/sandboxes/${src.sandboxId}/fork`, { method: 'POST', headers: { 'X-API-KEY': srv.key, 'Content-Type': 'application/json' }, body: JSON.stringify({ count: 1 }) })
  assert.equal(res.status, 201)
  const [made] = await res.json()
  assert.ok(made.sandbox, JSON.stringify(made))
  const fork = await Sandbox.connect(made.sandbox.sandboxID, srv.opts)
  t.after(() => fork.kill().catch(() => {}))
  const info = await fork.getInfo()
  assert.deepEqual({ allowOut: info.network?.allowOut, denyOut: info.network?.denyOut }, { allowOut: [w.public], denyOut: ['0.0.0.0/0'] })
  const r = await probe(fork, [['tcp', w.public, 2222], ['http', 'allowed.test', 80, 'allowed.test'], ['udp', '203.0.113.5', 9999, 'x']])
  assert.equal(r[0], 'ok:BANNER public')
  assert.ok(refused(r[1]) && refused(r[2]), JSON.stringify(r))
})

test('bad network options are refused naming the field; nothing is created', T, async (t) => {
  if (skipped(t)) return
  const post = (body) => fetch(`${srv.url}/sandboxes`, { method: 'POST', headers: { 'X-API-KEY': srv.key, 'Content-Type': 'application/json' },
    body: JSON.stringify({ templateID: 'base', ...body }) })
  const cases = [
    [{ network: { allowOut: ['10.0.0.0/33'] } }, /field 'network\.allowOut\[0\]': "10\.0\.0\.0\/33": the prefix after '\/' must be 0\.\.32/],
    [{ network: { denyOut: ['8.8.8.8', 'example.com'] } }, /field 'network\.denyOut\[1\]': "example\.com": host names are not supported in denyOut/],
    [{ network: { allowOut: 'example.com' } }, /field 'network\.allowOut' must be an array of strings/],
    [{ network: { allowOut: [7] } }, /field 'network\.allowOut\[0\]' must be a string/],
    [{ network: { alowOut: [] } }, /field 'network\.alowOut' is not one of E2B's network options/],
    [{ network: { rules: { '*': [{ transform: { headers: { A: 'b' } } }] } } }, /field 'network\.rules' "\*": not a host name/],
    [{ network: { rules: { 'a.com': [{ transfrom: {} }] } } }, /field 'network\.rules\["a\.com"\]\[0\]' must be/],
    [{ network: { rules: { 'a.com': [{ transform: { headers: { A: '${e2b.identity.tokens.aws}' } } }] } } }, /workload identity tokens\) is not supported/],
    [{ network: { rules: { 'a.com': [{ transform: { headers: { A: 'x\r\nB: y' } } }] } } }, /header "A": the value holds a control character/],
    [{ network: { rules: { 'a.com': [{ transform: { headers: { Host: 'x' } } }] } } }, /header "Host" cannot be set by a rule/],
    [{ network: { egressProxy: { address: 'p:1080' } } }, /field 'network\.egressProxy'/],
    [{ network: { allowPublicTraffic: 'no' } }, /field 'network\.allowPublicTraffic' must be a boolean/],
    [{ network: { allowPublicTraffic: false } }, /field 'network\.allowPublicTraffic': false needs a secure sandbox/],
    [{ network: { maskRequestHost: 'a/b' } }, /field 'network\.maskRequestHost'/],
    [{ network: [] }, /field 'network' must be an object/],
  ]
  const count = async () => (await (await fetch(`${srv.url}/sandboxes`, { headers: { 'X-API-KEY': srv.key } })).json()).length
  const n0 = await count()
  for (const [body, re] of cases) {
    const res = await post(body)
    assert.equal(res.status, 400, JSON.stringify(body))
    assert.match((await res.json()).message, re)
  }
  assert.equal(await count(), n0, 'a refused create left a sandbox')
  // the update: the same checks; unknown sandbox 404; a paused one 409
  const s = await box(t)
  const put = (id, body) => fetch(`${srv.url}/sandboxes/${id}/network`, { method: 'PUT', headers: { 'X-API-KEY': srv.key, 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
  let res = await put(s.sandboxId, { allowOut: ['1.2.3'] })
  assert.equal(res.status, 400)
  assert.match((await res.json()).message, /field 'allowOut\[0\]': "1\.2\.3" is not an address/)
  res = await put(s.sandboxId, { maskRequestHost: 'x' })
  assert.equal(res.status, 400)
  assert.match((await res.json()).message, /field 'maskRequestHost' is not part of a network update/)
  assert.equal((await put('inope', {})).status, 404)
  await assert.rejects(Sandbox.updateNetwork('inope', {}, srv.opts), /not found/i)
  await s.pause()
  assert.equal((await put(s.sandboxId, {})).status, 409)
})

test('root inside gains nothing: its own netfilter tables, routes and addresses, spoofed sources, raw and packet sockets, another DNS server', T, async (t) => {
  if (skipped(t)) return
  const w = world
  const victim = await box(t)                                   // everything allowed: a spoofer's target
  const s = await box(t, { network: { allowOut: ['allowed.test'], denyOut: ['0.0.0.0/0'] } })
  const vip = (await sh(victim, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1")).out.trim()
  const root = { user: 'root', timeoutMs: 30_000 }
  const own = (await sh(s, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1")).out.trim()
  const seen = async () => { const st = await w.stats(); return [st.tcp['public:2222'] ?? 0, st.udp.filter(([wh]) => wh === 'public').length] }
  const before = await seen()
  // its own table flushed, the victim's address taken and made the source of everything it sends
  const tamper = await sh(s, `nft flush ruleset && ip addr add ${vip}/32 dev eth0 && ip route replace default via 169.254.1.1 dev eth0 src ${vip} && echo done`, root)
  assert.match(tamper.out, /done/)
  let r = await probe(s, [['tcp', w.public, 2222], ['udp', w.public, 9999, 'x'], ['http', w.public, 80, 'other.test']])
  assert.ok(r.every(refused), `a taken address opened a way: ${JSON.stringify(r)}`)
  await sh(s, `ip route replace default via 169.254.1.1 dev eth0 src ${own} && ip addr del ${vip}/32 dev eth0`, root)
  r = await probe(s, [['tcp', w.public, 2222], ['udp', w.public, 9999, 'x']])
  assert.ok(r.every(refused), `flushing its own table opened a way: ${JSON.stringify(r)}`)
  // spoofed sources from a raw socket and a packet socket: the victim's, the world's, a private one
  const spoof = String.raw`
import socket, struct, subprocess
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def packet(src, dst, payload):
    udp = struct.pack('!HHHH', 40000, 9999, 8 + len(payload), 0) + payload
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return ip[:10] + struct.pack('!H', csum(ip)) + ip[12:] + udp
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
link = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); link.bind(('eth0', 0))
me = open('/sys/class/net/eth0/address').read().strip()
neigh = subprocess.run(['ip', 'neigh', 'show', '169.254.1.1'], capture_output=True, text=True).stdout.split()
gw = neigh[neigh.index('lladdr') + 1] if 'lladdr' in neigh else 'ff:ff:ff:ff:ff:ff'
mac = lambda m: bytes(int(x, 16) for x in m.split(':'))
for src in ('${vip}', '${w.public}', '10.213.1.1'):
    for i in range(3):
        p = packet(src, '${w.public}', b'spoofed-' + src.encode())
        raw.sendto(p, ('${w.public}', 0))
        link.send(mac(gw) + mac(me) + b'\x08\x00' + p)
print('sent')
`
  await s.files.write('/tmp/spoof.py', spoof)
  assert.match((await sh(s, 'python3 /tmp/spoof.py', root)).out, /sent/)
  await new Promise((ok) => setTimeout(ok, 500))
  const udp = (await w.stats()).udp.filter(([, , d]) => d.startsWith('spoofed-'))
  assert.deepEqual(udp, [], `a spoofed datagram got out: ${JSON.stringify(udp)}`)
  assert.deepEqual(await seen(), before, 'the world saw traffic of the tampering sandbox')
  // another DNS server (the world's own, directly) and resolv.conf pointing at it
  await sh(s, `echo nameserver ${w.dns} > /etc/resolv.conf`, root)
  r = await probe(s, [['dns', 'other.test'], ['udp', w.dns, 53, 'x']])
  assert.ok(r.every(refused), JSON.stringify(r))
  // the victim's traffic still works (its address was not taken over)
  assert.equal((await probe(victim, [['tcp', w.public, 2222]]))[0], 'ok:BANNER public')
})
