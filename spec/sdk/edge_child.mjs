// The SDK as E2B's cloud users configure it, for spec/sdk/edge.test.mjs: this process gets only
// E2B_API_KEY and E2B_DOMAIN (plus NODE_EXTRA_CA_CERTS for the test's CA, and the test-only DNS
// preload edge_dns.cjs); no E2B_API_URL, no E2B_SANDBOX_URL. It runs the checks of one mode and
// prints one JSON line: { <check>: { ok, value | error } } for the parent to assert.
//   node edge_child.mjs full     per-sandbox hosts (<port>-<id>.<domain>): the whole path
//   node edge_child.mjs shared   a shared domain (sandbox.<domain> + E2b-Sandbox-Id/-Port)
//   node edge_child.mjs tls      one control-plane call: how TLS to api.<domain> fails
//   node edge_child.mjs traffic  allowPublicTraffic: false: getHost with and without the
//                                e2b-traffic-access-token header, by host and by sandbox.<domain>
import tls from 'node:tls'
import { randomBytes, createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const sdk = await import(process.env.MB_E2B_SDK || 'e2b')
const { Sandbox } = sdk
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_DEBUG']) if (process.env[v]) throw new Error(`${v} must not be set here`)
const domain = process.env.E2B_DOMAIN
const mode = process.argv[2]
const results = {}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function check(name, fn) {
  try {
    results[name] = { ok: true, value: await fn() }
  } catch (e) {
    results[name] = { ok: false, error: `${e?.name}: ${e?.message}`, cause: e?.cause ? `${e.cause.code ?? ''} ${e.cause.message ?? e.cause}` : undefined,
      class: e?.constructor?.name }
  }
}
const must = (c, what) => { if (!c) throw new Error(what) }

const getJson = async (url, init) => {
  const r = await fetch(url, init)
  const text = await r.text()
  let body = text
  try { body = JSON.parse(text) } catch { /* not JSON */ }
  return { status: r.status, type: r.headers.get('content-type'), body }
}

/** Polls url until it answers 200 (a server that is starting), at most 15 s. */
async function until200(url) {
  let last
  for (let i = 0; i < 150; i++) {
    try {
      const r = await getJson(url)
      if (r.status === 200) return r
      last = r
    } catch (e) { last = e.message }
    await sleep(100)
  }
  throw new Error(`${url} never answered 200: ${JSON.stringify(last)}`)
}

/** A WebSocket round trip to wss://host/ over the name's own TLS (the handshake written out). */
function websocket(host) {
  return new Promise((resolve, reject) => {
    const sock = tls.connect({ host, port: 443, servername: host })
    const key = randomBytes(16).toString('base64')
    let buf = Buffer.alloc(0), head = null
    const frames = []
    const mask = (op, text) => {
      const m = randomBytes(4), p = Buffer.from(text)
      return Buffer.concat([Buffer.from([0x80 | op, 0x80 | p.length]), m, p.map((b, i) => b ^ m[i % 4])])
    }
    const timer = setTimeout(() => { sock.destroy(); reject(new Error(`websocket to ${host}: no end within 15 s (${JSON.stringify({ head, frames })})`)) }, 15000)
    sock.on('secureConnect', () => sock.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n`
      + `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`))
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d])
      if (!head) {
        const i = buf.indexOf('\r\n\r\n')
        if (i < 0) return
        head = buf.subarray(0, i).toString()
        buf = buf.subarray(i + 4)
        sock.write(mask(1, 'hello through the edge'))
        sock.write(mask(1, 'bye'))
      }
      while (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
        const n = buf[1] & 0x7f
        frames.push({ op: buf[0] & 0x0f, text: buf.subarray(2, 2 + n).toString('latin1') })
        buf = buf.subarray(2 + n)
      }
    })
    sock.on('close', () => {
      clearTimeout(timer)
      const accept = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
      resolve({ status: head?.split('\r\n')[0], acceptOk: head?.includes(`Sec-WebSocket-Accept: ${accept}`) ?? false, frames })
    })
    sock.on('error', (e) => { clearTimeout(timer); reject(e) })
  })
}

async function startServers(sbx) {
  await sbx.files.write('/tmp/port_server.py', readFileSync(path.join(HERE, '..', 'support', 'port_server.py'), 'utf8'))
  await sbx.files.write('/tmp/www/index.txt', 'served from inside the sandbox\n')
  for (const cmd of ['python3 -m http.server 8000 -d /tmp/www', 'python3 /tmp/port_server.py 9000']) {
    const h = await sbx.commands.run(cmd, { background: true, timeoutMs: 0 })
    await h.disconnect()
  }
}

/** Polls until url (with init) answers `status`, at most 15 s. */
async function untilStatus(url, init, status) {
  let last
  for (let i = 0; i < 150; i++) {
    try {
      const r = await getJson(url, init)
      if (r.status === status) return r
      last = r
    } catch (e) { last = e.message }
    await sleep(100)
  }
  throw new Error(`${url} never answered ${status}: ${JSON.stringify(last)}`)
}

if (mode === 'traffic') {
  let sbx
  await check('create', async () => {
    sbx = await Sandbox.create('base', { timeoutMs: 120_000, network: { allowPublicTraffic: false }, metadata: { edge: mode } })
    return { id: sbx.sandboxId, token: sbx.trafficAccessToken ?? null }
  })
  if (sbx) {
    const token = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
    await check('commands', async () => (await sbx.commands.run('echo envd-$((6*7))')).stdout)   /* 49983: envd's own token */
    await check('servers', async () => { await startServers(sbx); return true })
    await check('withToken', async () => {
      const r = await untilStatus(`https://${sbx.getHost(8000)}/index.txt`, { headers: token }, 200)
      return { host: sbx.getHost(8000), body: r.body }
    })
    await check('noToken', () => getJson(`https://${sbx.getHost(8000)}/index.txt`))
    await check('wrongToken', () => getJson(`https://${sbx.getHost(8000)}/index.txt`, { headers: { 'e2b-traffic-access-token': 'x'.repeat(40) } }))
    await check('portHeaders', async () => {
      const r = await untilStatus(`https://${sbx.getHost(9000)}/headers`, { headers: token }, 200)
      return r.body.headers.map(([k]) => k.toLowerCase())
    })
    const shared = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' }
    await check('sharedNoToken', () => getJson(`https://sandbox.${domain}/index.txt`, { headers: shared }))
    await check('sharedWithToken', () => getJson(`https://sandbox.${domain}/index.txt`, { headers: { ...shared, ...token } }))
    await check('connect', async () => (await Sandbox.connect(sbx.sandboxId)).trafficAccessToken === sbx.trafficAccessToken)
    await check('kill', async () => sbx.kill())
  }
} else if (mode === 'tls') {
  await check('list', async () => (await Sandbox.list().nextItems()).length)
} else {
  let sbx
  await check('create', async () => {
    sbx = await Sandbox.create('base', { timeoutMs: 120_000, metadata: { edge: mode } })
    return { id: sbx.sandboxId, domain: sbx.sandboxDomain ?? null, host: sbx.getHost(49983) }
  })
  if (sbx) {
    await check('commands', async () => {
      const r = await sbx.commands.run('echo edge-$((6*7)); id -un')
      return r.stdout
    })
    await check('files', async () => {
      await sbx.files.write('/home/user/edge.txt', 'bytes over TLS')
      const back = await sbx.files.read('/home/user/edge.txt')
      const names = (await sbx.files.list('/home/user')).map((e) => e.name)
      return { back, listed: names.includes('edge.txt') }
    })
    await check('signedDownload', async () => {
      const url = await sbx.downloadUrl('/home/user/edge.txt', { useSignatureExpiration: 60_000 })
      const r = await fetch(url)
      return { host: new URL(url).host, status: r.status, body: await r.text() }
    })
    await check('servers', async () => { await startServers(sbx); return true })
    await check('getHost', async () => {
      const host = sbx.getHost(8000)
      const r = await until200(`https://${host}/index.txt`)
      return { host, body: r.body }
    })
    if (mode === 'full') {
      await check('portHeaders', async () => {
        const r = await until200(`https://${sbx.getHost(9000)}/headers`)
        const h = Object.fromEntries(r.body.headers.map(([k, v]) => [k.toLowerCase(), v]))
        return { host: h.host, target: r.body.target, forwarded: 'x-forwarded-for' in h }
      })
      await check('portUpload', async () => {
        const data = randomBytes(3 << 20)
        const r = await getJson(`https://${sbx.getHost(9000)}/sum`, { method: 'POST', body: data })
        return { status: r.status, same: r.body.sha256 === createHash('sha256').update(data).digest('hex') && r.body.length === data.length }
      })
      await check('websocket', () => websocket(sbx.getHost(9000)))
      await check('closedPort', () => getJson(`https://${sbx.getHost(8001)}/`))
      await check('unknownHost', () => getJson(`https://8000-inosuchsandbox000000000.${domain}/`))
      await check('unknownConnect', async () => {
        try { await Sandbox.connect('inosuchsandbox000000000'); return 'connected' } catch (e) { return e.constructor.name }
      })
      await check('paused', async () => {
        await Sandbox.pause(sbx.sandboxId)
        const running = await sbx.isRunning()
        const viaHost = await getJson(`https://${sbx.getHost(8000)}/index.txt`)
        let command
        try { await sbx.commands.run('true', { requestTimeoutMs: 10_000 }); command = 'ran' } catch (e) { command = e.constructor.name }
        return { running, viaHost, command }
      })
      await check('resumed', async () => {
        await Sandbox.connect(sbx.sandboxId)
        const r = await until200(`https://${sbx.getHost(8000)}/index.txt`)
        return { running: await sbx.isRunning(), body: r.body }
      })
    }
    await check('kill', async () => {
      const killed = await sbx.kill()
      return { killed, running: await sbx.isRunning(), viaHost: await getJson(`https://${sbx.getHost(8000)}/`) }
    })
  }
  if (mode === 'full') {
    await check('wrongKey', async () => {
      const out = {}
      for (const [what, fn] of [['list', () => Sandbox.list({ apiKey: 'e2b_' + 'f'.repeat(40) }).nextItems()],
        ['create', () => Sandbox.create('base', { apiKey: 'e2b_' + 'f'.repeat(40) })]]) {
        try { await fn(); out[what] = 'accepted' } catch (e) { out[what] = `${e.constructor.name}: ${e.message}` }
      }
      return out
    })
  }
}
process.stdout.write(JSON.stringify(results) + '\n')
