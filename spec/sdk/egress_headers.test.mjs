// Header rules at the egress (issue 18): E2B's `network.rules` with `${e2b.secrets.NAME}` filled in
// by sandboxd's egress proxy as a request leaves, so that the value never exists inside the sandbox.
// Every request goes to the stand-in world of spec/support/networld.py; its HTTPS server's CA is
// what the file's sandboxd verifies upstream with (--egress-ca). The world answers GET
// /header/NAME?sha256=H with whether NAME arrived with the value whose SHA-256 is H (never the value).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { T, Sandbox, startSandboxd, stopSandboxd, startNetworld, sh, uniq, marker } from './helpers.mjs'

let world, srv, why
before(async () => {
  world = await startNetworld()
  if (world.why) { why = world.why; return }
  srv = await startSandboxd({ args: ['--dns', world.dns, '--egress-ca', world.ca], env: { SANDBOXD_TRACE_EGRESS: '1' } })
}, { timeout: 60_000 })
after(async () => {
  await stopSandboxd(srv)
  if (world?.stop) await world.stop()
})
const S = () => ({ ...T, skip: why })

const sha = (s) => createHash('sha256').update(s).digest('hex')

async function api(method, p, body) {
  const r = await fetch(`${srv.url}${p}`, {
    method,
    headers: { 'X-API-Key': srv.key, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  return { status: r.status, body: text ? JSON.parse(text) : null }
}

/** A secret of the file's sandboxd (removed after t); metadata scopes it. */
async function secret(t, name, value, metadata) {
  const r = await api('POST', '/secrets', { name, value, ...(metadata ? { metadata } : {}) })
  assert.equal(r.status, 201, JSON.stringify(r.body))
  t.after(() => api('DELETE', `/secrets/${name}`).catch(() => {}))
  return r.body
}

const bearer = (name) => ({ transform: { headers: { Authorization: `Bearer \${e2b.secrets.${name}}` } } })

/** A sandbox whose egress reaches allowed.test and other.test only, with rules; killed after t. */
async function box(t, rules, network = {}) {
  const sbx = await Sandbox.create('base', {
    ...srv.opts, timeoutMs: 180_000, metadata: { test: uniq('hd') },
    network: { allowOut: ['allowed.test', 'other.test'], denyOut: ['0.0.0.0/0'], ...(rules ? { rules } : {}), ...network },
  })
  t.after(() => sbx.kill().catch(() => {}))
  return sbx
}

/** What the world says about header NAME (expected value: want) for url's host. */
async function seen(sbx, url, want, name = 'Authorization', curlArgs = '') {
  const r = await sh(sbx, `curl -sS --max-time 20 ${curlArgs} '${url}/header/${name}?sha256=${sha(want)}'`)
  return r.out.trim()
}

/** A raw exchange from inside the sandbox (python: bytes as given, TLS optional); the answer's text. */
async function raw(sbx, { host, port, tls = false, send }) {
  const py = String.raw`
import socket, ssl, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
if sys.argv[3] == '1':
    s = ssl.create_default_context().wrap_socket(s, server_hostname=sys.argv[1])
s.sendall(sys.argv[4].encode().decode('unicode_escape').encode())
data = b''
while True:
    try:
        d = s.recv(65536)
    except (socket.timeout, ConnectionResetError):
        break
    if not d:
        break
    data += d
print(data.decode(errors='replace'))
`
  await sbx.files.write('/tmp/raw.py', py)
  const arg = send.replace(/\r/g, '\\r').replace(/\n/g, '\\n').replace(/'/g, "'\\''")
  return (await sh(sbx, `python3 /tmp/raw.py ${host} ${port} ${tls ? 1 : 0} '${arg}'`, { timeoutMs: 30_000 })).out
}

const LOOK = String.raw`
import os, sys
v = (sys.argv[1] + sys.argv[2]).encode()
found = []
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) != os.getpid():
        for f in ('environ', 'cmdline'):
            try:
                if v in open(f'/proc/{pid}/{f}', 'rb').read(): found.append(f'/proc/{pid}/{f}')
            except OSError:
                pass
for top in ('/etc', '/tmp', '/root', '/home', '/usr/local', '/var'):
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                if os.path.isfile(p) and not os.path.islink(p) and v in open(p, 'rb').read(): found.append(p)
            except OSError:
                pass
print('found', len(found), *found)
`

test('a secret in a rule reaches its host over HTTPS and HTTP; the sandbox never holds the value', S(), async (t) => {
  const name = uniq('tok').toLowerCase()
  const value = `v-${marker()}-${marker()}`
  await secret(t, name, value)
  const sbx = await box(t, { 'allowed.test': [bearer(name)] })
  const want = `Bearer ${value}`
  assert.equal(await seen(sbx, 'https://allowed.test', want), 'header Authorization match')
  assert.equal(await seen(sbx, 'http://allowed.test', want), 'header Authorization match')
  // The sandbox's own header of that name is replaced, not sent along.
  assert.equal(await seen(sbx, 'https://allowed.test', want, 'Authorization', "-H 'Authorization: Bearer mine'"), 'header Authorization match')
  // Python's ssl (the system bundle) and node (NODE_EXTRA_CA_CERTS) trust the proxy's certificate.
  const h = sha(want)
  const py = await sh(sbx, `python3 -c "import urllib.request as u; print(u.urlopen('https://allowed.test/header/Authorization?sha256=${h}').read().decode().strip())"`)
  assert.equal(py.out.trim(), 'header Authorization match', py.out)
  const node = await sh(sbx, `node -e "fetch('https://allowed.test/header/Authorization?sha256=${h}').then(r => r.text()).then(t => console.log(t.trim()))"`)
  assert.equal(node.out.trim(), 'header Authorization match', node.out)
  // Another header and another host get nothing.
  assert.equal(await seen(sbx, 'https://allowed.test', want, 'X-Other'), 'header X-Other absent')
  // The value is nowhere inside: environment, command lines, files (looked for by a root process
  // given it in two halves, so that no command line of the search holds it whole).
  const half = value.length >> 1
  await sbx.files.write('/tmp/look.py', LOOK)
  const look = await sh(sbx, `sudo python3 /tmp/look.py '${value.slice(0, half)}' '${value.slice(half)}'`, { timeoutMs: 60_000 })
  assert.equal(look.out.trim(), 'found 0', look.out)
  assert.ok(!srv.log().includes(value), 'sandboxd logged the value')
  // The CA is trusted inside; its key is not there (only certificates in what sandboxd wrote).
  const ca = await sh(sbx, `grep -c 'BEGIN CERTIFICATE' /usr/local/share/ca-certificates/sandboxd-egress.crt; cat /usr/local/share/ca-certificates/sandboxd-egress.crt /etc/ssl/certs/ca-certificates.crt | grep -c 'PRIVATE KEY'`)
  assert.deepEqual(ca.out.trim().split(/\s+/), ['1', '0'], ca.out)
  assert.match(srv.log(), /https GET allowed\.test:443 -> forwarded \(1 header set\)/)
})

test('requests are bound to their host: Host and SNI must agree, a connection begun for another host is not taken over', S(), async (t) => {
  const name = uniq('tok').toLowerCase()
  const value = `v-${marker()}`
  await secret(t, name, value)
  const sbx = await box(t, { 'allowed.test': [bearer(name)] })
  const h = sha(`Bearer ${value}`)
  // TLS for allowed.test, Host other.test: 421, nothing forwarded with the secret.
  const mis = await sh(sbx, `curl -sS -H 'Host: other.test' 'https://allowed.test/header/Authorization?sha256=${h}'`)
  assert.match(mis.out, /"code":421.*Misdirected/, mis.out)
  // Plain HTTP: a keep-alive connection that began as other.test (no rule: relayed as it is) sends
  // allowed.test next: it is still other.test's relay, the secret is not added.
  const kept = await raw(sbx, {
    host: 'allowed.test', port: 80,
    send: `GET / HTTP/1.1\r\nHost: other.test\r\n\r\nGET /header/Authorization?sha256=${h} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n`,
  })
  assert.match(kept, /public other\.test/, kept)
  assert.match(kept, /header Authorization absent/, kept)
  // Pipelined requests on a taken-over connection: each gets it.
  const piped = await raw(sbx, {
    host: 'allowed.test', port: 80,
    send: `GET /header/Authorization?sha256=${h} HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /header/Authorization?sha256=${h} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n`,
  })
  assert.equal(piped.match(/header Authorization match/g)?.length, 2, piped)
  // HTTP/1.0 without a Host over TLS: bound to the handshake's name.
  const old = await raw(sbx, { host: 'allowed.test', port: 443, tls: true, send: `GET /header/Authorization?sha256=${h} HTTP/1.0\r\n\r\n` })
  assert.match(old, /header Authorization match/, old)
  // CONNECT: on a taken-over connection 405; elsewhere a CONNECT names no host the rules can
  // decide by (its target is no origin-form path), so with denyOut 0.0.0.0/0 it is reset.
  const tunnel = await raw(sbx, { host: 'allowed.test', port: 80, send: `CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n` })
  assert.match(tunnel, /^HTTP\/1\.1 405 .*CONNECT is not served here/s, tunnel)
  const through = await raw(sbx, { host: 'other.test', port: 80, send: `CONNECT allowed.test:443 HTTP/1.1\r\nHost: other.test\r\n\r\n` })
  assert.equal(through.trim(), '', through)
  // A proxy's absolute target and a Host with another port are refused.
  const abs = await raw(sbx, { host: 'allowed.test', port: 80, send: `GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n` })
  assert.match(abs, /^HTTP\/1\.1 400/, abs)
  const port = await raw(sbx, { host: 'allowed.test', port: 443, tls: true, send: `GET / HTTP/1.1\r\nHost: allowed.test:8443\r\nConnection: close\r\n\r\n` })
  assert.match(port, /^HTTP\/1\.1 421/, port)
})

test('a secret the store lacks, one scoped to another sandbox, one deleted meanwhile: 502 naming it, nothing sent', S(), async (t) => {
  const mine = uniq('tok').toLowerCase()
  await secret(t, mine, `v-${marker()}`)
  const other = await Sandbox.create('base', { ...srv.opts, timeoutMs: 60_000 })
  t.after(() => other.kill().catch(() => {}))
  const scoped = uniq('scoped').toLowerCase()
  await secret(t, scoped, `v-${marker()}`, { 'sandboxd.sandbox': other.sandboxId })
  const missing = uniq('nope').toLowerCase()
  const sbx = await box(t, {
    'allowed.test': [bearer(mine)],
    'other.test': [bearer(scoped)],
    '*.pkg.test': [bearer(missing)],
  }, { allowOut: ['allowed.test', 'other.test', '*.pkg.test'] })
  const before = (await world.stats()).tcp['public:443'] ?? 0
  const r1 = await sh(sbx, `curl -sS https://other.test/`)
  assert.match(r1.out, new RegExp(`"code":502.*secret \\\\"${scoped}\\\\" is not known`), r1.out)
  const r2 = await sh(sbx, `curl -sS http://a.pkg.test/`)
  assert.match(r2.out, new RegExp(`"code":502.*${missing}`), r2.out)
  assert.equal((await world.stats()).tcp['public:443'] ?? 0, before, 'a request went out without its header')
  assert.match(await seen(sbx, 'https://allowed.test', 'x'), /header Authorization mismatch/)
  assert.equal((await api('DELETE', `/secrets/${mine}`)).status, 204)
  const r3 = await sh(sbx, `curl -sS https://allowed.test/`)
  assert.match(r3.out, /"code":502/, r3.out)
})

test('rules added to a running sandbox apply to its next requests (its CA trusted then); removed, requests go out untouched', S(), async (t) => {
  const name = uniq('tok').toLowerCase()
  const value = `v-${marker()}`
  await secret(t, name, value)
  const sbx = await box(t, null)
  const want = `Bearer ${value}`
  await sbx.files.write('/tmp/world-ca.pem', await readFile(world.ca, 'utf8'))
  assert.equal(await seen(sbx, 'https://allowed.test', want, 'Authorization', '--cacert /tmp/world-ca.pem'), 'header Authorization absent')
  const net = { allowOut: ['allowed.test', 'other.test'], denyOut: ['0.0.0.0/0'] }
  let r = await api('PUT', `/sandboxes/${sbx.sandboxId}/network`, { ...net, rules: { 'allowed.test': [bearer(name)] } })
  assert.equal(r.status, 204, JSON.stringify(r.body))
  assert.equal(await seen(sbx, 'https://allowed.test', want), 'header Authorization match')
  const info = await api('GET', `/sandboxes/${sbx.sandboxId}`)
  assert.deepEqual(Object.keys(info.body.network.rules), ['allowed.test'])
  r = await api('PUT', `/sandboxes/${sbx.sandboxId}/network`, net)
  assert.equal(r.status, 204, JSON.stringify(r.body))
  assert.equal(await seen(sbx, 'https://allowed.test', want, 'Authorization', '--cacert /tmp/world-ca.pem'), 'header Authorization absent')
})

test('a host with rules that allowOut does not name is refused like any other', S(), async (t) => {
  const name = uniq('tok').toLowerCase()
  await secret(t, name, `v-${marker()}`)
  const sbx = await box(t, { 'allowed.test': [bearer(name)] }, { allowOut: ['other.test'] })
  // (its DNS is refused too: the address given by hand)
  const r = await sh(sbx, `curl -sS --max-time 10 --resolve allowed.test:443:${world.public} https://allowed.test/; echo " exit=$?"`)
  assert.match(r.out, /exit=(35|56|7)\b/, r.out)
  assert.match(srv.log(), /tcp [\d.]+:443 \(allowed\.test\) -> deny/)
})

test('16 requests at once through the proxy each get the header; a killed sandbox ends its open request', S(), async (t) => {
  const name = uniq('tok').toLowerCase()
  const value = `v-${marker()}`
  await secret(t, name, value)
  const sbx = await box(t, { 'allowed.test': [bearer(name)] })
  const h = sha(`Bearer ${value}`)
  const r = await sh(sbx, `seq 16 | xargs -P16 -I{} curl -sS 'https://allowed.test/header/Authorization?sha256=${h}' | sort | uniq -c`)
  assert.match(r.out.trim(), /^16 header Authorization match$/, r.out)
  // A slow download through the proxy, then the sandbox is killed under it.
  await sbx.commands.run(`curl -sS --limit-rate 100k -o /dev/null https://allowed.test/bytes/100000000`, { background: true })
  await new Promise((ok) => setTimeout(ok, 1500))
  await sbx.kill()
  // sandboxd still serves, and a new sandbox's requests are taken over as before.
  const again = await box(t, { 'allowed.test': [bearer(name)] })
  assert.equal(await seen(again, 'https://allowed.test', `Bearer ${value}`), 'header Authorization match')
})
