// Traffic access tokens (issue 18 item 3), through both SDKs: a sandbox created with
// network.allowPublicTraffic: false gets a token (create and connect answer it, as E2B's do; its
// getInfo reports allowPublicTraffic: false), and its ports then want the header
// e2b-traffic-access-token: on the path proxy /_sandbox/<id>/<port>/ here, and in edge mode by
// getHost (<port>-<id>.<domain>) and by sandbox.<domain> with the routing headers (a child with
// only E2B_API_KEY and E2B_DOMAIN, as spec/sdk/edge.test.mjs runs it; root: port 443). Without
// it or with another, E2B's edge's 403; envd (49983) keeps its own credentials; the port never
// sees the header; a paused auto-resume sandbox is not woken by a request without it.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { makePki, startEdge } from '../support/edge.mjs'
import { T, HERE, SDK_PACKAGE, SDK_VERSION, ZERO_KEY, newSandbox, requireEnv, apiFetch, postJson, waitFor, uniq, Sandbox } from './helpers.mjs'

const missing = (id) => ({ sandboxId: id, message: "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing", code: 403 })
const invalid = (id) => ({ sandboxId: id, message: 'Sandbox is secured with traffic access token. Provided token is invalid.', code: 403 })

async function getJson(url, init) {
  const r = await fetch(url, init)
  const text = await r.text()
  let body = text
  try { body = JSON.parse(text) } catch { /* not JSON */ }
  return { status: r.status, type: r.headers.get('content-type'), body }
}

async function startServers(sbx) {
  await sbx.files.write('/tmp/port_server.py', readFileSync(path.join(HERE, '..', 'support', 'port_server.py'), 'utf8'))
  await sbx.files.write('/tmp/www/index.txt', 'served from inside the sandbox\n')
  for (const cmd of ['python3 -m http.server 8000 -d /tmp/www', 'python3 /tmp/port_server.py 9000']) {
    const h = await sbx.commands.run(cmd, { background: true, timeoutMs: 0 })
    await h.disconnect()
  }
}

const portUrl = (id, port, p = '/') => `${requireEnv().sbx}/_sandbox/${id}/${port}${p}`

test(`e2b@${SDK_VERSION}: allowPublicTraffic: false → a traffic token; the path proxy wants it`, T, async (t) => {
  const sbx = await newSandbox(t, { network: { allowPublicTraffic: false } })
  assert.match(sbx.trafficAccessToken ?? '', /^[a-z0-9]{40}$/, 'create answers trafficAccessToken')
  const info = await sbx.getInfo()
  assert.equal(info.network?.allowPublicTraffic, false)
  assert.ok(!JSON.stringify(info).includes(sbx.trafficAccessToken), 'getInfo carries no token (E2B\'s SandboxDetail has none)')
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.trafficAccessToken, sbx.trafficAccessToken, 'connect answers it too')
  await startServers(sbx)                              // envd (49983): its own token, none other
  const token = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
  const ok = await waitFor(async () => {
    const r = await getJson(portUrl(sbx.sandboxId, 8000, '/index.txt'), { headers: token })
    return r.status === 200 && r
  }, { what: 'the server inside' })
  assert.equal(ok.body, 'served from inside the sandbox\n')
  const none = await getJson(portUrl(sbx.sandboxId, 8000, '/index.txt'))
  assert.equal(none.status, 403)
  assert.match(none.type, /^application\/json/)
  assert.deepEqual(none.body, missing(sbx.sandboxId))
  const empty = await getJson(portUrl(sbx.sandboxId, 8000, '/index.txt'), { headers: { 'e2b-traffic-access-token': '' } })
  assert.deepEqual(empty.body, missing(sbx.sandboxId))
  for (const wrong of ['x'.repeat(40), sbx.trafficAccessToken.slice(0, 39), `${sbx.trafficAccessToken}x`, sbx.envdAccessToken ?? 'y']) {
    const r = await getJson(portUrl(sbx.sandboxId, 8000, '/index.txt'), { headers: { 'e2b-traffic-access-token': wrong } })
    assert.equal(r.status, 403)
    assert.deepEqual(r.body, invalid(sbx.sandboxId))
  }
  // the routing headers name the port the same way
  const byHeader = await getJson(`${requireEnv().sbx}/index.txt`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' } })
  assert.deepEqual(byHeader.body, missing(sbx.sandboxId))
  // the port does not see the header
  // (the second server may still be starting: wait for it as for the first)
  const seen = await waitFor(async () => {
    const r = await getJson(portUrl(sbx.sandboxId, 9000, '/headers'), { headers: token })
    return r.status === 200 && r
  }, { what: 'the header server inside' })
  assert.ok(!seen.body.headers.some(([k]) => k.toLowerCase() === 'e2b-traffic-access-token'), JSON.stringify(seen.body.headers))
  // a closed port answers as ever once the token is right; without it, the 403 first
  assert.equal((await getJson(portUrl(sbx.sandboxId, 8001), { headers: token })).status, 502)
  assert.equal((await getJson(portUrl(sbx.sandboxId, 8001))).status, 403)
  // another sandbox, public: no token, no header needed
  const pub = await newSandbox(t)
  assert.equal(pub.trafficAccessToken, undefined)
  assert.equal((await getJson(portUrl(pub.sandboxId, 8000))).status, 502, 'the port proxy answers (nothing listens), no 403')
  // the token is the sandbox's own
  assert.equal((await getJson(portUrl(sbx.sandboxId, 8000, '/index.txt'), { headers: { 'e2b-traffic-access-token': 'y'.repeat(40) } })).status, 403)
})

test('a paused auto-resume sandbox is woken by its port only with the token; a fork gets its own', T, async (t) => {
  const res = await postJson('/sandboxes', { templateID: 'base', secure: true, timeout: 120, autoPause: true, autoResume: { enabled: true },
    network: { allowPublicTraffic: false }, metadata: { moonboxTest: uniq('t') } })
  const made = await res.json()
  assert.equal(res.status, 201, JSON.stringify(made))
  t.after(() => apiFetch(`/sandboxes/${made.sandboxID}`, { method: 'DELETE' }))
  assert.match(made.trafficAccessToken, /^[a-z0-9]{40}$/)
  const sbx = await Sandbox.connect(made.sandboxID)
  await startServers(sbx)
  const token = { 'e2b-traffic-access-token': made.trafficAccessToken }
  await waitFor(async () => (await getJson(portUrl(made.sandboxID, 8000, '/index.txt'), { headers: token })).status === 200, { what: 'the server' })
  const state = async () => (await (await apiFetch(`/sandboxes/${made.sandboxID}`)).json()).state
  await Sandbox.pause(made.sandboxID)
  assert.equal(await state(), 'paused')
  assert.equal((await getJson(portUrl(made.sandboxID, 8000, '/index.txt'))).status, 403)
  assert.equal(await state(), 'paused', 'a request without the token wakes nothing')
  const r = await getJson(portUrl(made.sandboxID, 8000, '/index.txt'), { headers: token })
  assert.equal(r.status, 200)
  assert.equal(await state(), 'running')
  // the v1 API: a token needs a secure sandbox, as on E2B
  const insecure = await postJson('/sandboxes', { templateID: 'base', secure: false, network: { allowPublicTraffic: false } })
  assert.equal(insecure.status, 400)
  assert.match((await insecure.json()).message, /field 'network\.allowPublicTraffic': false needs a secure sandbox/)
  // a fork: private too, with a token of its own
  const fres = await postJson(`/sandboxes/${made.sandboxID}/fork`, { count: 1, timeout: 60 })
  const forks = await fres.json()
  assert.equal(fres.status, 201, JSON.stringify(forks))
  const fork = forks[0].sandbox
  t.after(() => apiFetch(`/sandboxes/${fork.sandboxID}`, { method: 'DELETE' }))
  assert.match(fork.trafficAccessToken, /^[a-z0-9]{40}$/)
  assert.notEqual(fork.trafficAccessToken, made.trafficAccessToken)
  assert.equal((await getJson(portUrl(fork.sandboxID, 8000), { headers: token })).status, 403, 'the source\'s token is not the fork\'s')
})

// ---- edge mode: getHost, as E2B's cloud users reach a port ----
const DOMAIN = 'traffic.moonbox.test'
const why = process.getuid() === 0 ? false : 'not root: the edge listens on port 443'
let dir, edge
after(async () => {
  if (edge) await edge.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test(`e2b@${SDK_VERSION} in edge mode: getHost and sandbox.<domain> want the token; envd does not`, { timeout: 150_000, skip: why }, async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'mb-traffic-edge-'))
  const pki = makePki(dir)
  const c = pki.cert('edge', `DNS:*.${DOMAIN},DNS:${DOMAIN}`)
  edge = await startEdge({ domain: DOMAIN, cert: c.cert, tlsKey: c.key, tls: 'random:443' })
  const env = {
    PATH: process.env.PATH, HOME: dir, E2B_API_KEY: ZERO_KEY, E2B_DOMAIN: DOMAIN, NODE_EXTRA_CA_CERTS: pki.ca,
    NODE_OPTIONS: `--require ${path.join(HERE, 'edge_dns.cjs')}`, MB_EDGE_DOMAIN: DOMAIN, MB_EDGE_ADDR: edge.tlsAddr, MB_E2B_SDK: SDK_PACKAGE,
  }
  const r = await new Promise((resolve, reject) => execFile(process.execPath, [path.join(HERE, 'edge_child.mjs'), 'traffic'],
    { env, cwd: HERE, timeout: 120_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      try { resolve(JSON.parse(stdout.trim().split('\n').pop())) } catch { reject(new Error(`edge_child traffic failed (${err?.message}): ${stdout}${stderr}`)) }
    }))
  const ok = (name) => {
    assert.ok(r[name]?.ok, `check ${name}: ${JSON.stringify(r[name])}`)
    return r[name].value
  }
  const { id, token } = ok('create')
  assert.match(token ?? '', /^[a-z0-9]{40}$/)
  assert.equal(ok('commands'), 'envd-42\n')
  assert.deepEqual(ok('withToken'), { host: `8000-${id}.${DOMAIN}`, body: 'served from inside the sandbox\n' })
  for (const name of ['noToken', 'sharedNoToken']) {
    const v = ok(name)
    assert.equal(v.status, 403, name)
    assert.match(v.type, /^application\/json/)
    assert.deepEqual(v.body, missing(id), name)
  }
  assert.deepEqual(ok('wrongToken').body, invalid(id))
  assert.ok(!ok('portHeaders').includes('e2b-traffic-access-token'), 'the port never sees the header')
  assert.deepEqual(ok('sharedWithToken'), { status: 200, type: ok('sharedWithToken').type, body: 'served from inside the sandbox\n' })
  assert.equal(ok('connect'), true)
  ok('kill')
})
