// Streamed /files uploads: bodies go to a private temporary file next to the target while they
// arrive (never buffered whole), and replace the target only once complete. Memory is checked as
// sandboxd's peak RSS (VmHWM), so this file always starts its own sandboxd (MB_BUILD_DIR, else
// SANDBOXD_BIN / build) with SANDBOXD_MAX_UPLOAD set. Run: node --test tests/sandboxd/
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { createHash } from 'node:crypto'
import { createGzip } from 'node:zlib'
import http from 'node:http'
import { sandboxdBin, startSandboxd } from './support.mjs'

const MiB = 1 << 20
const LIMIT = 320 * MiB
const BIN = process.env.MB_BUILD_DIR ? resolve(process.env.MB_BUILD_DIR, 'bin/sandboxd') : sandboxdBin()
const KEY = 'e2b_' + '0'.repeat(40)
let srv, child, base

before(async () => {
  srv = await startSandboxd({ bin: BIN, prefix: 'sbxd-upload-', key: KEY,
    env: { ...process.env, SANDBOXD_MAX_UPLOAD: String(LIMIT) } })
  child = srv.child
  base = srv.url
})

after(async () => { if (srv) await srv.stop() })

const hwm = () => Number(readFileSync(`/proc/${child.pid}/status`, 'utf8').match(/VmHWM:\s+(\d+) kB/)[1]) * 1024

async function create() {
  const r = await fetch(base + '/sandboxes', { method: 'POST', headers: { 'X-API-KEY': KEY, 'Content-Type': 'application/json' }, body: JSON.stringify({ templateID: 'base', timeout: 300 }) })
  assert.equal(r.status, 201)
  return r.json()
}
const kill = (s) => fetch(base + `/sandboxes/${s.sandboxID}`, { method: 'DELETE', headers: { 'X-API-KEY': KEY } })
const hdrs = (s, extra = {}) => ({ 'E2b-Sandbox-Id': s.sandboxID, ...(s.envdAccessToken ? { 'X-Access-Token': s.envdAccessToken } : {}), ...extra })

// Deterministic content: chunk i of 1 MiB is filled with (i*7+seed) & 255, with its index on top.
function chunk(i, seed) {
  const b = Buffer.alloc(MiB, (i * 7 + seed) & 255)
  b.writeUInt32BE(i, 0)
  return b
}

// POST with a body written piece by piece (chunked; backpressure respected). `pieces` is an async
// generator of Buffers. Resolves {status, body}.
function post(s, path, headers, pieces, { abortAfter } = {}) {
  return new Promise((resolveP, reject) => {
    const u = new URL(base)
    const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path, headers: hdrs(s, headers) }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolveP({ status: res.statusCode, body: body ? JSON.parse(body) : null }))
    })
    req.on('error', (e) => (abortAfter ? resolveP({ aborted: true }) : reject(e)))
    ;(async () => {
      let sent = 0
      for await (const p of pieces) {
        if (!req.write(p)) await new Promise((r) => req.once('drain', r))
        sent += p.length
        if (abortAfter && sent >= abortAfter.bytes) { await abortAfter.wait(); req.destroy(); resolveP({ aborted: true }); return }
      }
      req.end()
    })().catch(reject)
  })
}

async function download(s, path) {
  const r = await fetch(base + `/files?path=${encodeURIComponent(path)}`, { headers: hdrs(s) })
  assert.equal(r.status, 200)
  const h = createHash('sha256')
  let n = 0
  for await (const c of r.body) { h.update(c); n += c.length }
  return { sha: h.digest('hex'), size: n }
}

async function listNames(s, dir) {
  const r = await fetch(base + '/filesystem.Filesystem/ListDir', { method: 'POST', headers: hdrs(s, { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' }), body: JSON.stringify({ path: dir, depth: 1 }) })
  assert.equal(r.status, 200)
  return (await r.json()).entries.map((e) => ({ name: e.name, size: Number(e.size || 0) }))
}

// Polls (bounded count, no time limit asserted) until cond() holds; returns whether it did.
async function until(cond, tries = 600) {
  for (let i = 0; i < tries; i++) { if (await cond()) return true; await new Promise((r) => setTimeout(r, 100)) }
  return false
}

test('a 300 MiB octet-stream upload round-trips with sandboxd memory far below its size', { timeout: 600_000 }, async () => {
  const s = await create()
  try {
    const warm = await post(s, '/files?path=/tmp/big.bin', { 'Content-Type': 'application/octet-stream' }, (async function* () { yield Buffer.from('warm') })())
    assert.equal(warm.status, 200)
    const before = hwm()
    const h = createHash('sha256')
    const r = await post(s, '/files?path=/tmp/big.bin', { 'Content-Type': 'application/octet-stream', 'X-Metadata-Kind': 'big' }, (async function* () {
      for (let i = 0; i < 300; i++) { const c = chunk(i, 1); h.update(c); yield c }
    })())
    assert.equal(r.status, 200, JSON.stringify(r.body))
    assert.deepEqual(r.body, [{ path: '/tmp/big.bin', name: 'big.bin', type: 'file', metadata: { kind: 'big' } }])
    const grew = hwm() - before
    assert.ok(grew < 64 * MiB, `sandboxd peak RSS grew by ${grew} bytes for a 300 MiB upload`)
    const d = await download(s, '/tmp/big.bin')
    assert.equal(d.size, 300 * MiB)
    assert.equal(d.sha, h.digest('hex'))
    assert.deepEqual((await listNames(s, '/tmp')).map((e) => e.name).filter((n) => n.includes('.upload-')), [])
  } finally { await kill(s) }
})

test('a multipart upload of 3 files round-trips with sandboxd memory far below its size', { timeout: 600_000 }, async () => {
  const s = await create()
  try {
    const boundary = 'sbxdBoundary' + 'x'.repeat(20)
    const hashes = [0, 1, 2].map(() => createHash('sha256'))
    const before = hwm()
    const r = await post(s, '/files', { 'Content-Type': `multipart/form-data; boundary=${boundary}` }, (async function* () {
      for (let f = 0; f < 3; f++) {
        yield Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="/tmp/mp/f${f}.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`)
        for (let i = 0; i < 60; i++) { const c = chunk(i, 10 + f); hashes[f].update(c); yield c }
        yield Buffer.from('\r\n')
      }
      yield Buffer.from(`--${boundary}--\r\n`)
    })())
    assert.equal(r.status, 200, JSON.stringify(r.body))
    assert.deepEqual(r.body.map((e) => e.path), ['/tmp/mp/f0.bin', '/tmp/mp/f1.bin', '/tmp/mp/f2.bin'])
    const grew = hwm() - before
    assert.ok(grew < 64 * MiB, `sandboxd peak RSS grew by ${grew} bytes for a 180 MiB multipart upload`)
    for (let f = 0; f < 3; f++) {
      const d = await download(s, `/tmp/mp/f${f}.bin`)
      assert.equal(d.size, 60 * MiB)
      assert.equal(d.sha, hashes[f].digest('hex'))
    }
    assert.deepEqual((await listNames(s, '/tmp/mp')).map((e) => e.name).sort(), ['f0.bin', 'f1.bin', 'f2.bin'])
  } finally { await kill(s) }
})

test('a client that aborts mid-upload leaves the old content and no temporary file', { timeout: 600_000 }, async () => {
  const s = await create()
  try {
    const old = await post(s, '/files?path=/tmp/keep.txt', { 'Content-Type': 'application/octet-stream' }, (async function* () { yield Buffer.from('old content') })())
    assert.equal(old.status, 200)
    // Abort once the temporary file next to the target holds some of the new bytes.
    const tmpSeen = () => until(async () => (await listNames(s, '/tmp')).some((e) => e.name.startsWith('.keep.txt.upload-') && e.size > 0))
    let seen = false
    const r = await post(s, '/files?path=/tmp/keep.txt', { 'Content-Type': 'application/octet-stream', 'Content-Length': String(100 * MiB) }, (async function* () {
      for (let i = 0; i < 100; i++) yield chunk(i, 3)
    })(), { abortAfter: { bytes: 8 * MiB, wait: async () => { seen = await tmpSeen() } } })
    assert.ok(r.aborted)
    assert.ok(seen, 'the new bytes go to a temporary file next to the target while they arrive')
    assert.ok(await until(async () => !(await listNames(s, '/tmp')).some((e) => e.name.includes('.upload-'))), 'the temporary file is removed')
    const g = await fetch(base + '/files?path=/tmp/keep.txt', { headers: hdrs(s) })
    assert.equal(await g.text(), 'old content')
  } finally { await kill(s) }
})

test('an aborted upload takes away the directories it made, and only those', { timeout: 600_000 }, async () => {
  const s = await create()
  try {
    // /tmp/made/a exists and holds a file of its own; /tmp/made/a/b/c is new
    const other = await post(s, '/files?path=/tmp/made/a/other.txt', { 'Content-Type': 'application/octet-stream' }, (async function* () { yield Buffer.from('x') })())
    assert.equal(other.status, 200)
    const tmpSeen = () => until(async () => (await listNames(s, '/tmp/made/a/b/c').catch(() => [])).some((e) => e.name.includes('.upload-') && e.size > 0))
    let seen = false
    const r = await post(s, '/files?path=/tmp/made/a/b/c/new.bin', { 'Content-Type': 'application/octet-stream', 'Content-Length': String(100 * MiB) }, (async function* () {
      for (let i = 0; i < 100; i++) yield chunk(i, 4)
    })(), { abortAfter: { bytes: 8 * MiB, wait: async () => { seen = await tmpSeen() } } })
    assert.ok(r.aborted)
    assert.ok(seen, 'the upload made /tmp/made/a/b/c')
    assert.ok(await until(async () => !(await listNames(s, '/tmp/made/a')).some((e) => e.name === 'b')), 'b (and c under it) removed')
    assert.deepEqual((await listNames(s, '/tmp/made/a')).map((e) => e.name), ['other.txt'])
  } finally { await kill(s) }
})

test('over the per-request cap: 413 in bytes received or written (gzip bombs too), target untouched', { timeout: 600_000 }, async () => {
  const s = await create()
  try {
    assert.equal((await post(s, '/files?path=/tmp/cap.txt', { 'Content-Type': 'application/octet-stream' }, (async function* () { yield Buffer.from('kept') })())).status, 200)
    let r = await post(s, '/files?path=/tmp/cap.txt', { 'Content-Type': 'application/octet-stream' }, (async function* () {
      for (let i = 0; i < 321; i++) yield chunk(i, 5)
    })())
    assert.equal(r.status, 413)
    assert.deepEqual(r.body, { code: 413, message: `request body exceeds the limit of ${LIMIT} bytes` })
    // A gzip body of well under a MiB that expands past the cap.
    const gz = createGzip()
    const parts = []
    gz.on('data', (d) => parts.push(d))
    const ended = new Promise((res) => gz.on('end', res))
    const zeros = Buffer.alloc(MiB)
    for (let i = 0; i < 330; i++) if (!gz.write(zeros)) await new Promise((res) => gz.once('drain', res))
    gz.end()
    await ended
    const bomb = Buffer.concat(parts)
    assert.ok(bomb.length < MiB)
    r = await post(s, '/files?path=/tmp/cap.txt', { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' }, (async function* () { yield bomb })())
    assert.equal(r.status, 413)
    assert.deepEqual(r.body, { code: 413, message: `gzip body expands beyond the limit of ${LIMIT} bytes` })
    const g = await fetch(base + '/files?path=/tmp/cap.txt', { headers: hdrs(s) })
    assert.equal(await g.text(), 'kept')
    assert.ok(await until(async () => !(await listNames(s, '/tmp')).some((e) => e.name.includes('.upload-'))), 'no temporary file is left')
  } finally { await kill(s) }
})
