// sandboxd in edge mode, reached as E2B's cloud is: the unmodified SDK in a child process that
// has only E2B_API_KEY and E2B_DOMAIN (plus NODE_EXTRA_CA_CERTS for a CA made here), talking TLS
// to https://api.<domain>, https://49983-<id>.<domain> and https://<port>-<id>.<domain>
// (getHost), or https://sandbox.<domain> with routing headers for E2B's shared domains. The
// wildcard DNS record is the child's test-only preload edge_dns.cjs (every name under the domain
// → the test's sandboxd, which listens on <random loopback address>:443). Needs root (port 443).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { makePki, startEdge } from '../support/edge.mjs'
import { HERE, SDK_PACKAGE, SDK_VERSION, ZERO_KEY } from './helpers.mjs'

const DOMAIN = 'edge.moonbox.test'
const SHARED = 'e2b.dev'          // one of E2B's shared domains: the SDK sends envd to sandbox.<domain>
const ROOT = process.getuid() === 0
const why = ROOT ? null : 'not root: the edge listens on port 443, as https://api.<domain> needs'

// Set up by the first test that needs it (a failing before hook would leave the tests skipped,
// not failed).
let dir, pki, edge, shared, ready
const setup = () => (ready ??= (async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'mb-edge-sdk-'))
  pki = makePki(dir)
  const c = pki.cert('edge', `DNS:*.${DOMAIN},DNS:${DOMAIN}`)
  const s = pki.cert('shared', `DNS:*.${SHARED},DNS:${SHARED}`)
  ;[edge, shared] = await Promise.all([
    startEdge({ domain: DOMAIN, cert: c.cert, tlsKey: c.key, tls: 'random:443' }),
    startEdge({ domain: SHARED, cert: s.cert, tlsKey: s.key, tls: 'random:443', env: { SANDBOXD_WARM_POOL: '0' } }),
  ])
})())
after(async () => {
  for (const s of [edge, shared]) if (s) await s.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

/** The child with the cloud configuration only; → its results object. */
function child(mode, { domain, addr, ca, key = ZERO_KEY }) {
  const env = {
    PATH: process.env.PATH, HOME: dir,
    E2B_API_KEY: key, E2B_DOMAIN: domain, NODE_EXTRA_CA_CERTS: ca,
    NODE_OPTIONS: `--require ${path.join(HERE, 'edge_dns.cjs')}`, MB_EDGE_DOMAIN: domain, MB_EDGE_ADDR: addr,
    MB_E2B_SDK: SDK_PACKAGE,
  }
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(HERE, 'edge_child.mjs'), mode], { env, cwd: HERE, timeout: 120_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        const line = stdout.trim().split('\n').pop()
        try { resolve(JSON.parse(line)) } catch { reject(new Error(`edge_child ${mode} failed (${err?.message}): ${stdout}${stderr}`)) }
      })
  })
}

/** The value of a check that must have passed. */
function ok(results, name) {
  const r = results[name]
  assert.ok(r, `check ${name} did not run: ${JSON.stringify(results)}`)
  assert.ok(r.ok, `check ${name} failed: ${r.error} ${r.cause ?? ''}`)
  return r.value
}

const notFound = (id) => ({ sandboxId: id, message: 'The sandbox was not found', code: 502 })

test(`e2b@${SDK_VERSION} with only E2B_API_KEY and E2B_DOMAIN: control plane, envd, files, getHost, WebSocket, errors`, { timeout: 150_000, skip: why ?? false }, async () => {
  await setup()
  const r = await child('full', { domain: DOMAIN, addr: edge.tlsAddr, ca: pki.ca })
  const { id, host } = ok(r, 'create')
  assert.match(id, /^i[a-z0-9]{20}$/)
  assert.equal(host, `49983-${id}.${DOMAIN}`, 'envd is the sandbox\'s own host')
  assert.equal(ok(r, 'commands'), 'edge-42\nuser\n')
  assert.deepEqual(ok(r, 'files'), { back: 'bytes over TLS', listed: true })
  assert.deepEqual(ok(r, 'signedDownload'), { host: `49983-${id}.${DOMAIN}`, status: 200, body: 'bytes over TLS' },
    'a signed URL names the sandbox by its host alone')
  ok(r, 'servers')
  assert.deepEqual(ok(r, 'getHost'), { host: `8000-${id}.${DOMAIN}`, body: 'served from inside the sandbox\n' })
  assert.deepEqual(ok(r, 'portHeaders'), { host: `9000-${id}.${DOMAIN}`, target: '/headers', forwarded: false },
    'the port sees the Host the client used, as E2B\'s edge forwards it')
  assert.deepEqual(ok(r, 'portUpload'), { status: 200, same: true })
  const ws = ok(r, 'websocket')
  assert.equal(ws.status, 'HTTP/1.1 101 Switching Protocols')
  assert.ok(ws.acceptOk, 'the port\'s Sec-WebSocket-Accept reaches the client')
  assert.deepEqual(ws.frames, [{ op: 1, text: 'hello through the edge' }, { op: 8, text: '\x03\xe8' }])
  const closed = ok(r, 'closedPort')
  assert.equal(closed.status, 502)
  assert.match(closed.type, /^application\/json/)
  assert.deepEqual(closed.body, { sandboxId: id, message: 'The sandbox is running but port is not open', port: 8001, code: 502 })
  const unknown = ok(r, 'unknownHost')
  assert.equal(unknown.status, 502)
  assert.deepEqual(unknown.body, notFound('inosuchsandbox000000000'))
  assert.match(ok(r, 'unknownConnect'), /NotFound/)
  const paused = ok(r, 'paused')
  assert.equal(paused.running, false, 'isRunning() of a paused sandbox')
  assert.equal(paused.viaHost.status, 502)
  assert.deepEqual(paused.viaHost.body, notFound(id))
  assert.notEqual(paused.command, 'ran', 'envd of a paused sandbox refuses')
  assert.deepEqual(ok(r, 'resumed'), { running: true, body: 'served from inside the sandbox\n' }, 'connect resumes it, its server goes on')
  const killed = ok(r, 'kill')
  assert.equal(killed.running, false)
  assert.equal(killed.viaHost.status, 502)
  assert.deepEqual(killed.viaHost.body, notFound(id))
  const wrong = ok(r, 'wrongKey')
  assert.match(wrong.list, /^AuthenticationError/)
  assert.match(wrong.create, /^AuthenticationError/)
})

test(`e2b@${SDK_VERSION} on a shared domain: envd through https://sandbox.<domain> and the routing headers`, { timeout: 120_000, skip: why ?? false }, async () => {
  await setup()
  const r = await child('shared', { domain: SHARED, addr: shared.tlsAddr, ca: pki.ca })
  const { id } = ok(r, 'create')
  assert.equal(ok(r, 'commands'), 'edge-42\nuser\n')
  assert.deepEqual(ok(r, 'files'), { back: 'bytes over TLS', listed: true })
  assert.equal(ok(r, 'signedDownload').host, `49983-${id}.${SHARED}`, 'signed URLs still name the sandbox\'s own host')
  assert.equal(ok(r, 'signedDownload').body, 'bytes over TLS')
  assert.deepEqual(ok(r, 'getHost'), { host: `8000-${id}.${SHARED}`, body: 'served from inside the sandbox\n' })
  assert.equal(ok(r, 'kill').running, false)
})

test(`e2b@${SDK_VERSION} refuses the edge without the right certificate: another CA, expired, another host`, { timeout: 120_000, skip: why ?? false }, async () => {
  await setup()
  const expired = pki.cert('expired', `DNS:*.${DOMAIN},DNS:${DOMAIN}`, { expired: true })
  const other = pki.cert('elsewhere', 'DNS:*.elsewhere.test')
  const quiet = { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' }
  const bad = await Promise.all([
    startEdge({ domain: DOMAIN, cert: expired.cert, tlsKey: expired.key, tls: 'random:443', env: quiet }),
    startEdge({ domain: DOMAIN, cert: other.cert, tlsKey: other.key, tls: 'random:443', env: quiet }),
  ])
  try {
    const cases = [
      ['another CA', edge.tlsAddr, pki.otherCa(), /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT/],
      ['expired', bad[0].tlsAddr, pki.ca, /CERT_HAS_EXPIRED/],
      ['another host', bad[1].tlsAddr, pki.ca, /ERR_TLS_CERT_ALTNAME_INVALID/],
    ]
    for (const [what, addr, ca, code] of cases) {
      const r = await child('tls', { domain: DOMAIN, addr, ca })
      assert.equal(r.list.ok, false, `${what}: the SDK must refuse`)
      assert.match(`${r.list.error} ${r.list.cause}`, code, `${what}: ${JSON.stringify(r.list)}`)
    }
    // the right CA on the good edge: the same call succeeds (the cases above fail for their reason)
    const good = await child('tls', { domain: DOMAIN, addr: edge.tlsAddr, ca: pki.ca })
    assert.ok(good.list.ok, JSON.stringify(good.list))
  } finally {
    await Promise.all(bad.map((s) => s.stop()))
  }
})
