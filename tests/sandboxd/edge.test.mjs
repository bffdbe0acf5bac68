// sandboxd's port proxy on the wire, in edge mode (TLS, routing by Host) and through the plain
// listener's path proxy /_sandbox/<id>/<port>/: what the port sees and what the client gets,
// bodies both ways, bounded buffers when either side stops reading, WebSocket tunnels closed
// from either side (and half-closed), E2B's refusals, a sandbox paused or killed under live
// connections, and no descriptor or thread left behind. Starts its own sandboxd; the sandbox's
// servers are spec/support/port_server.py and python3 -m http.server.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import tls from 'node:tls'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { makePki, startEdge, portServerSource } from '../../spec/support/edge.mjs'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
const { Sandbox } = await import(pathToFileURL(path.join(ROOT, 'spec/sdk/node_modules/e2b/dist/index.mjs')).href)
const D = 'wire.moonbox.test'
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

let dir, pki, srv, ready
const setup = () => (ready ??= (async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'mb-edge-wire-'))
  pki = makePki(dir)
  const c = pki.cert('edge', `DNS:*.${D},DNS:${D}`)
  // no warm pool: sandboxd's descriptors and threads then change only with what the tests do
  srv = await startEdge({ domain: D, cert: c.cert, tlsKey: c.key, env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  srv.ca = readFileSync(pki.ca)
  srv.opts = { apiUrl: srv.http, sandboxUrl: srv.http, apiKey: srv.key }
})())
after(async () => {
  if (srv) await srv.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

/** A sandbox with the servers up (port_server on 9000, http.server on 8000). */
async function sandboxWithServers() {
  const sbx = await Sandbox.create('base', { ...srv.opts, timeoutMs: 300_000 })
  await sbx.files.write('/tmp/port_server.py', portServerSource())
  await sbx.files.write('/tmp/www/index.txt', 'index\n')
  for (const cmd of ['python3 /tmp/port_server.py 9000', 'python3 -m http.server 8000 -d /tmp/www']) {
    const h = await sbx.commands.run(cmd, { background: true, timeoutMs: 0, ...srv.opts })
    await h.disconnect()
  }
  for (let i = 0; i < 100; i++) {
    const a = await req('tls', sbx.sandboxId, 9000, '/headers').catch(() => null)
    const b = await req('tls', sbx.sandboxId, 8000, '/index.txt').catch(() => null)
    if (a?.status === 200 && b?.status === 200) return sbx
    await sleep(100)
  }
  throw new Error('the sandbox\'s servers did not come up')
}

/** One request through the proxy: `via` 'tls' (https://<port>-<id>.D) or 'path' (the plain path
 * proxy). → { status, headers, body (Buffer) }. `body` may be a Buffer or an async iterable. */
function req(via, id, port, target, { method = 'GET', headers = {}, body, host } = {}) {
  return new Promise((resolve, reject) => {
    const name = host ?? `${port}-${id}.${D}`
    const o = via === 'tls'
      ? { mod: https, host: srv.tlsAddr, port: srv.tlsPort, servername: name.split(':')[0], ca: srv.ca, path: target, headers: { Host: name, ...headers } }
      : { mod: http, host: '127.0.0.1', port: new URL(srv.http).port, path: `/_sandbox/${id}/${port}${target}`, headers }
    const r = o.mod.request({ ...o, method, agent: false }, (res) => {
      const parts = []
      res.on('data', (d) => parts.push(d))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts) }))
      res.on('error', reject)
    })
    r.on('error', reject)
    if (body && typeof body[Symbol.asyncIterator] === 'function') {
      ;(async () => { for await (const chunk of body) if (!r.write(chunk)) await new Promise((ok) => r.once('drain', ok)); r.end() })().catch(reject)
    } else r.end(body)
  })
}
const jsonOf = (r) => JSON.parse(r.body.toString())

/** sandboxd's open descriptors and threads (host /proc). */
const counts = () => ({ fds: readdirSync(`/proc/${srv.proc.pid}/fd`).length, threads: readdirSync(`/proc/${srv.proc.pid}/task`).length })
const rssKiB = () => Number(readFileSync(`/proc/${srv.proc.pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)/m)[1])
/** Waits until counts are back at (or under) `base`: a leak keeps them up. */
async function backTo(base, what) {
  let now
  for (let i = 0; i < 100; i++) {
    now = counts()
    if (now.fds <= base.fds && now.threads <= base.threads) return now
    await sleep(100)
  }
  assert.fail(`${what}: sandboxd holds ${JSON.stringify(now)}, before ${JSON.stringify(base)}`)
}

// ---- a WebSocket client with the handshake written out

function wsConnect(via, id, port = 9000) {
  return new Promise((resolve, reject) => {
    const host = `${port}-${id}.${D}`
    const sock = via === 'tls'
      ? tls.connect({ host: srv.tlsAddr, port: srv.tlsPort, servername: host, ca: srv.ca })
      : net.connect({ port: Number(new URL(srv.http).port), host: '127.0.0.1', allowHalfOpen: true })
    const target = via === 'tls' ? '/' : `/_sandbox/${id}/${port}/`
    const key = randomBytes(16).toString('base64')
    const ws = { sock, frames: [], ended: false, closed: false, head: null, waiters: [] }
    let buf = Buffer.alloc(0)
    const wake = () => { for (const w of ws.waiters.splice(0)) w() }
    sock.once(via === 'tls' ? 'secureConnect' : 'connect', () => sock.write(`GET ${target} HTTP/1.1\r\nHost: ${via === 'tls' ? host : 'local'}\r\n`
      + `Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`))
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d])
      if (!ws.head) {
        const i = buf.indexOf('\r\n\r\n')
        if (i < 0) return
        ws.head = buf.subarray(0, i).toString()
        buf = buf.subarray(i + 4)
        const accept = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64')
        if (!ws.head.startsWith('HTTP/1.1 101 ') || !ws.head.includes(`Sec-WebSocket-Accept: ${accept}`)) reject(new Error(`no upgrade: ${ws.head}`))
        else resolve(ws)
      }
      for (;;) {
        if (buf.length < 2) break
        let n = buf[1] & 0x7f, off = 2
        if (n === 126) { if (buf.length < 4) break; n = buf.readUInt16BE(2); off = 4 }
        if (buf.length < off + n) break
        ws.frames.push({ op: buf[0] & 0x0f, data: buf.subarray(off, off + n) })
        buf = buf.subarray(off + n)
      }
      wake()
    })
    sock.on('end', () => { ws.ended = true; wake() })
    sock.on('close', () => { ws.closed = true; wake() })
    sock.on('error', (e) => { if (!ws.head) reject(e) })
  })
}
function wsSend(ws, op, payload) {
  const m = randomBytes(4), p = Buffer.from(payload)
  const h = p.length < 126 ? Buffer.from([0x80 | op, 0x80 | p.length]) : Buffer.from([0x80 | op, 0x80 | 126, p.length >> 8, p.length & 255])
  ws.sock.write(Buffer.concat([h, m, p.map((b, i) => b ^ m[i % 4])]))
}
/** Waits (hang detector: 20 s) until cond(ws) holds. */
async function wsUntil(ws, cond, what) {
  const deadline = Date.now() + 20_000
  while (!cond(ws)) {
    if (Date.now() > deadline) assert.fail(`${what}: not within 20 s (frames ${ws.frames.length}, ended ${ws.ended}, closed ${ws.closed})`)
    await new Promise((r) => { ws.waiters.push(r); setTimeout(r, 200) })
  }
}

let A, base
const sandboxA = async () => {
  await setup()
  if (!A) {
    A = await sandboxWithServers()
    await sleep(300)
    base = counts()
  }
  return A
}

test('HTTP through the port proxy: the target as sent, hop-by-hop headers dropped, the same over TLS and the path proxy', { timeout: 120_000 }, async () => {
  const id = (await sandboxA()).sandboxId
  for (const via of ['tls', 'path']) {
    const r = await req(via, id, 9000, '/headers?x=%2F&y=a%20b', {
      headers: { Connection: 'keep-alive, X-Hop', 'X-Hop': 'gone', 'Keep-Alive': 'timeout=5', TE: 'trailers', 'Proxy-Authorization': 'Basic eA==', 'X-End': 'kept' },
    })
    assert.equal(r.status, 200, via)
    const seen = jsonOf(r)
    assert.equal(seen.target, '/headers?x=%2F&y=a%20b', `${via}: the port gets the target undecoded`)
    const names = seen.headers.map(([k]) => k.toLowerCase())
    for (const gone of ['x-hop', 'keep-alive', 'te', 'proxy-authorization', 'expect', 'transfer-encoding']) assert.ok(!names.includes(gone), `${via}: ${gone} must not reach the port`)
    assert.deepEqual(seen.headers.find(([k]) => k.toLowerCase() === 'x-end'), ['X-End', 'kept'], via)
    const hostSeen = seen.headers.find(([k]) => k.toLowerCase() === 'host')[1]
    assert.equal(hostSeen, via === 'tls' ? `9000-${id}.${D}` : `127.0.0.1:${new URL(srv.http).port}`, `${via}: Host as the client sent it`)
    // the port's answer: status, headers and body as they were (here http.server's)
    const f = await req(via, id, 8000, '/index.txt')
    assert.equal(f.status, 200)
    assert.equal(f.body.toString(), 'index\n')
    assert.equal(f.headers['content-length'], '6')
    assert.match(f.headers.server, /SimpleHTTP/)
    const nf = await req(via, id, 8000, '/missing')
    assert.equal(nf.status, 404, 'the port\'s own errors pass through')
    const head = await req(via, id, 8000, '/index.txt', { method: 'HEAD' })
    assert.deepEqual([head.status, head.headers['content-length'], head.body.length], [200, '6', 0])
  }
  // /_sandbox/<id>/<port> with no path is the port's "/" (a query kept)
  const rootq = await new Promise((ok, no) => http.get({ host: '127.0.0.1', port: new URL(srv.http).port, path: `/_sandbox/${id}/9000?q=1`, agent: false },
    (res) => { let b = ''; res.on('data', (d) => (b += d)); res.on('end', () => ok({ status: res.statusCode, b })) }).on('error', no))
  assert.equal(rootq.status, 404)
  assert.equal(rootq.b, 'no such path\n', 'port_server saw its root')
})

test('bodies both ways: an 8 MiB chunked upload, a 16 MiB chunked download, over TLS and the path proxy', { timeout: 120_000 }, async () => {
  const id = (await sandboxA()).sandboxId
  const data = randomBytes(8 << 20)
  for (const via of ['tls', 'path']) {
    async function* chunks() { for (let o = 0; o < data.length; o += 300_000) yield data.subarray(o, o + 300_000) }
    const up = await req(via, id, 9000, '/sum', { method: 'POST', body: chunks(), headers: { 'Transfer-Encoding': 'chunked' } })
    assert.equal(up.status, 200)
    assert.deepEqual(jsonOf(up), { length: data.length, sha256: createHash('sha256').update(data).digest('hex') }, via)
    const put = await req(via, id, 9000, '/sum', { method: 'PUT', body: data.subarray(0, 1000) })
    assert.equal(jsonOf(put).length, 1000, `${via}: a Content-Length body`)
    const down = await req(via, id, 9000, `/big?n=${16 << 20}`)
    assert.equal(down.status, 200)
    assert.equal(down.headers['transfer-encoding'], 'chunked')
    assert.equal(down.body.length, 16 << 20)
    const want = Buffer.alloc(16 << 20)
    for (let o = 0; o < want.length; o += 65536) Buffer.from('0123456789'.repeat(6554)).copy(want, o, 0, Math.min(65536, want.length - o))
    assert.ok(down.body.equals(want), `${via}: the download's bytes`)
  }
})

test('bounded buffers: a client that stops reading a 256 MiB answer, a port that stops reading a 256 MiB upload', { timeout: 120_000 }, async () => {
  const id = (await sandboxA()).sandboxId
  // a download nobody reads: sandboxd holds at most its queue, the port is slowed down
  const before = rssKiB()
  const sock = tls.connect({ host: srv.tlsAddr, port: srv.tlsPort, servername: `9000-${id}.${D}`, ca: srv.ca })
  await new Promise((r) => sock.once('secureConnect', r))
  sock.write(`GET /big?n=${256 << 20} HTTP/1.1\r\nHost: 9000-${id}.${D}\r\n\r\n`)
  let got = 0
  await new Promise((r) => sock.once('data', (d) => { got += d.length; sock.pause(); r() }))
  await sleep(3000)
  const grew = rssKiB() - before
  assert.ok(grew < 32 * 1024, `sandboxd grew by ${grew} KiB while a client read nothing of 256 MiB`)
  sock.destroy()
  // an upload the port does not read: sandboxd holds at most its upload queue
  const before2 = rssKiB()
  const up = net.connect(Number(new URL(srv.http).port), '127.0.0.1')
  await new Promise((r) => up.once('connect', r))
  up.write(`POST /_sandbox/${id}/9000/stall HTTP/1.1\r\nHost: local\r\nContent-Length: ${256 << 20}\r\n\r\n`)
  const chunk = Buffer.alloc(1 << 20)
  let sent = 0
  const pump = async () => {
    while (sent < (256 << 20) && !up.destroyed) {
      sent += chunk.length
      if (!up.write(chunk)) await Promise.race([new Promise((r) => up.once('drain', r)), sleep(3000)])
    }
  }
  pump().catch(() => {})
  await sleep(3000)
  const grew2 = rssKiB() - before2
  assert.ok(sent < (64 << 20), `the client could push ${sent >> 20} MiB into a port that reads nothing (no backpressure)`)
  assert.ok(grew2 < 32 * 1024, `sandboxd grew by ${grew2} KiB while the port read nothing`)
  up.destroy()
  await backTo(base, 'after both stalled requests were dropped')
})

test('WebSocket tunnels: closed by the client, by the port, half-closed (plain), over TLS and the path proxy', { timeout: 120_000 }, async () => {
  const id = (await sandboxA()).sandboxId
  for (const via of ['tls', 'path']) {
    // the client closes: a close frame, answered, then the port ends the connection
    let ws = await wsConnect(via, id)
    assert.match(ws.head, /\r\nX-Echo: yes/, 'the port\'s own 101 headers')
    assert.equal(ws.head.match(/^Connection:/gim).length, 1)
    wsSend(ws, 1, 'ping through the tunnel')
    wsSend(ws, 2, randomBytes(5000))
    await wsUntil(ws, (w) => w.frames.length >= 2, `${via}: echoes`)
    assert.equal(ws.frames[0].data.toString(), 'ping through the tunnel')
    assert.equal(ws.frames[1].data.length, 5000)
    wsSend(ws, 8, Buffer.from([3, 232]))
    await wsUntil(ws, (w) => w.ended, `${via}: the close handshake ends the connection`)
    ws.sock.end()
    await wsUntil(ws, (w) => w.closed, `${via}: closed`)
    assert.equal(ws.frames[2].op, 8)
    // the port closes first
    ws = await wsConnect(via, id)
    wsSend(ws, 1, 'bye')
    await wsUntil(ws, (w) => w.ended, `${via}: the port's close reaches the client`)
    assert.equal(ws.frames.at(-1).op, 8)
    ws.sock.end()
    await wsUntil(ws, (w) => w.closed, `${via}: closed`)
    // the client drops the connection without a close frame
    ws = await wsConnect(via, id)
    ws.sock.destroy()
  }
  // plain HTTP passes half-closes: the port shuts its sending half, the client still sends
  const ws = await wsConnect('path', id)
  wsSend(ws, 1, 'half')
  await wsUntil(ws, (w) => w.ended, 'the port\'s half-close reaches the client as an end')
  assert.equal(ws.closed, false, 'half-closed, not closed')
  ws.sock.end(randomBytes(5000))
  await wsUntil(ws, (w) => w.closed, 'then the client\'s end closes it')
  let seen
  for (let i = 0; i < 100 && seen !== 5000; i++) {
    seen = jsonOf(await req('tls', id, 9000, '/halfseen')).seen
    if (seen !== 5000) await sleep(100)
  }
  assert.equal(seen, 5000, 'what the client sent after the port\'s half-close reached the port')
  await backTo(base, 'after every tunnel closed')
})

test('refusals: a closed port, an unknown sandbox, hosts and paths that name nothing, a percent-encoded prefix', { timeout: 60_000 }, async () => {
  const id = (await sandboxA()).sandboxId
  for (const via of ['tls', 'path']) {
    const r = await req(via, id, 8001, '/')
    assert.equal(r.status, 502, via)
    assert.match(r.headers['content-type'], /^application\/json/)
    assert.deepEqual(jsonOf(r), { sandboxId: id, message: 'The sandbox is running but port is not open', port: 8001, code: 502 })
    const u = await req(via, 'inosuchsandbox0000000x', 8000, '/')
    assert.equal(u.status, 502)
    assert.deepEqual(jsonOf(u), { sandboxId: 'inosuchsandbox0000000x', message: 'The sandbox was not found', code: 502 })
  }
  const bad = [
    [`${D}`, 400, 'Invalid host'], [`www.${D}`, 400, 'Invalid host'], [`x-${id}.${D}`, 400, 'Invalid sandbox port'],
    [`70000-${id}.${D}`, 400, 'Invalid sandbox port'], [`80--x.${D}`, 400, 'Invalid sandbox ID'],
  ]
  for (const [host, status, message] of bad) {
    const r = await req('tls', id, 0, '/', { host })
    assert.deepEqual([r.status, jsonOf(r).message], [status, message], host)
  }
  const shared = await req('tls', id, 0, '/headers', { host: `sandbox.${D}`, headers: { 'E2b-Sandbox-Id': id } })
  assert.deepEqual([shared.status, jsonOf(shared).message], [400, 'Missing header: E2b-Sandbox-Port'])
  const viaShared = await req('tls', id, 0, '/headers', { host: `sandbox.${D}`, headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '9000' } })
  assert.equal(viaShared.status, 200, 'sandbox.<domain> with both headers reaches the port')
  const enc = await new Promise((ok, no) => http.get({ host: '127.0.0.1', port: new URL(srv.http).port, path: `/_sandbox/%69${id.slice(1)}/9000/headers`, agent: false },
    (res) => { let b = ''; res.on('data', (d) => (b += d)); res.on('end', () => ok({ status: res.statusCode, b })) }).on('error', no))
  assert.equal(enc.status, 400)
  assert.match(enc.b, /must be sent as it is, not percent-encoded/)
  await backTo(base, 'after the refusals')
})

test('a sandbox paused or killed under live connections: streams and tunnels end, new requests get E2B\'s 502', { timeout: 120_000 }, async () => {
  await setup()
  for (const how of ['pause', 'kill']) {
    const sbx = await sandboxWithServers()
    const id = sbx.sandboxId
    const ws = await wsConnect('tls', id)
    const stream = tls.connect({ host: srv.tlsAddr, port: srv.tlsPort, servername: `9000-${id}.${D}`, ca: srv.ca })
    let streamClosed = false
    stream.on('close', () => { streamClosed = true })
    stream.on('error', () => {})
    await new Promise((r) => stream.once('secureConnect', r))
    stream.write(`GET /big?n=${256 << 20} HTTP/1.1\r\nHost: 9000-${id}.${D}\r\n\r\n`)
    await new Promise((r) => stream.once('data', () => { stream.pause(); r() }))
    if (how === 'pause') await Sandbox.pause(id, srv.opts)
    else await Sandbox.kill(id, srv.opts)
    await wsUntil(ws, (w) => w.closed, `${how}: the tunnel ends`)
    stream.resume()
    const deadline = Date.now() + 20_000
    while (!streamClosed && Date.now() < deadline) await sleep(100)
    assert.ok(streamClosed, `${how}: the download ends (cut, not completed)`)
    const r = await req('tls', id, 9000, '/headers')
    assert.equal(r.status, 502, how)
    assert.deepEqual(jsonOf(r), { sandboxId: id, message: 'The sandbox was not found', code: 502 })
    if (how === 'pause') {
      await Sandbox.connect(id, srv.opts)
      const again = await req('path', id, 9000, '/headers')
      assert.equal(again.status, 200, 'resumed: the port answers again')
      await Sandbox.kill(id, srv.opts)
    }
  }
})

test('sandboxd refuses edge flags that cannot work, naming them', { timeout: 120_000 }, async () => {
  await setup()
  const bin = path.join(process.env.MB_BUILD_DIR || path.join(ROOT, 'build'), 'bin', 'sandboxd')
  const c = pki.cert('mismatch', `DNS:*.${D}`)
  const other = pki.cert('other-key', `DNS:*.${D}`)
  const { execFile } = await import('node:child_process')
  const state = mkdtempSync(path.join(tmpdir(), 'mb-edge-flags-'))
  writeFileSync(path.join(state, 'key'), srv.key + '\n', { mode: 0o600 })   // never on a command line
  const run = (args) => new Promise((resolve) => execFile(bin, [...args, '--state-dir', state, '--api-key-file', path.join(state, 'key')],
    { timeout: 30_000, env: { ...process.env, SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } },
    (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stderr })))
  const cases = [
    [['--tls-listen', '127.0.0.1:0'], 2, /--tls-listen needs --tls-cert and --tls-key/],
    [['--listen', '127.0.0.1:0', '--tls-cert', c.cert], 2, /--tls-cert and --tls-key are for --tls-listen, which is missing/],
    [['--listen', '127.0.0.1:0', '--domain', 'Not_A.Domain'], 2, /--domain 'Not_A.Domain' must be a DNS name/],
    [['--listen', '127.0.0.1:0', '--domain', '.x'], 2, /--domain '.x' must be a DNS name/],
    [['--tls-listen', 'localhost:443', '--tls-cert', c.cert, '--tls-key', c.key], 2, /--tls-listen 'localhost:443': 'localhost' is not an IPv4 address/],
    [['--tls-listen', '127.0.0.1:0', '--tls-cert', path.join(dir, 'nope.pem'), '--tls-key', c.key], 2, /--tls-cert .*nope\.pem: No such file/],
    [['--tls-listen', '127.0.0.1:0', '--tls-cert', path.join(dir, 'edge.ext'), '--tls-key', c.key], 2, /--tls-cert .*edge\.ext: is not PEM/],
    [['--tls-listen', '127.0.0.1:0', '--tls-cert', c.cert, '--tls-key', other.key], 1, /cannot serve TLS on 127\.0\.0\.1:0: .*do not match/],
  ]
  try {
    for (const [args, code, message] of cases) {
      const r = await run(args)
      assert.equal(r.code, code, `${args.join(' ')}: ${r.stderr}`)
      assert.match(r.stderr, message, args.join(' '))
    }
  } finally {
    rmSync(state, { recursive: true, force: true })
  }
})
