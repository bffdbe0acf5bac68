// Hardening checks (review of issue 3): /files and the filesystem RPCs stay on the sandbox's own
// file systems, deep ListDir, stalled clients vs kill, WatchDir limits, pre-auth bodies, small
// protocol fixes. Uses E2B_API_URL/E2B_API_KEY when set, else starts SANDBOXD_BIN or
// build/bin/sandboxd on a free port. Run: node --test tests/sandboxd/
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import net from 'node:net'
import { useSandboxd, sandboxdBin, URL_, KEY, api, json, create, kill, envd, rpc, upload, envelope, envelopes } from './support.mjs'

useSandboxd('sbxd-hard-')

const hostURL = () => new URL(URL_)

test('/files cannot write or read kernel files through the sandbox /proc (host value unchanged)', async () => {
  const s = await create()
  try {
    // The reproducer writes the value the host already has, so even a regression changes nothing.
    for (const p of ['/proc/irq/default_smp_affinity', '/proc/sys/kernel/printk_ratelimit']) {
      if (!existsSync(p)) continue
      const before = readFileSync(p, 'utf8')
      const r = await json(await upload(s, p, before.trim()))
      assert.equal(r.status, 403, JSON.stringify(r.body))
      assert.match(r.body.message, /proc file system/)
      assert.ok(r.body.message.includes(p))
      assert.equal(readFileSync(p, 'utf8'), before)
    }
    let r = await json(await envd(s, '/files?path=/proc/version'))
    assert.equal(r.status, 403); assert.match(r.body.message, /'\/proc\/version' is on the sandbox's proc file system/)
    r = await json(await envd(s, '/files?path=/proc/cpuinfo'))
    assert.equal(r.status, 403)
    // The sandbox's own files still work, tmpfs included.
    assert.equal((await upload(s, '/dev/shm/ok.txt', 'ok')).status, 200)
    assert.equal(await (await envd(s, '/files?path=/dev/shm/ok.txt')).text(), 'ok')
    // RPCs: metadata may be read anywhere, nothing on proc may be changed or watched.
    assert.equal((await rpc(s, 'Stat', { path: '/proc/version' })).status, 200)
    assert.equal((await rpc(s, 'ListDir', { path: '/proc/irq' })).status, 200)
    for (const [m, msg] of [['MakeDir', { path: '/proc/irq/mb-x' }], ['Remove', { path: '/proc/irq/default_smp_affinity' }],
      ['Move', { source: '/proc/irq/default_smp_affinity', destination: '/tmp/x' }], ['Move', { source: '/tmp', destination: '/proc/sys/x' }]]) {
      r = await rpc(s, m, msg)
      assert.equal(r.body.code, 'permission_denied', `${m} ${JSON.stringify(msg)}: ${JSON.stringify(r.body)}`)
      assert.match(r.body.message, /own file systems/)
    }
    const w = await envd(s, '/filesystem.Filesystem/WatchDir', { method: 'POST', body: envelope({ path: '/proc/sys' }), headers: { 'Content-Type': 'application/connect+json' } })
    const env = envelopes(Buffer.from(await w.arrayBuffer()))
    assert.equal(env.at(-1).flags, 2); assert.equal(env.at(-1).msg.error.code, 'permission_denied')
  } finally { await kill(s.sandboxID) }
})

test('ListDir: a very deep tree neither crashes sandboxd nor takes more than the depth cap', async () => {
  const s = await create()
  try {
    const deep = '/tmp/d' + '/a'.repeat(2040)   // 4086 bytes: just under PATH_MAX
    let r = await rpc(s, 'MakeDir', { path: deep })
    assert.equal(r.status, 200, JSON.stringify(r.body))
    r = await rpc(s, 'ListDir', { path: '/tmp/d', depth: 5000 })
    assert.equal(r.body.code, 'invalid_argument'); assert.match(r.body.message, /'depth'.*1024/)
    r = await rpc(s, 'ListDir', { path: '/tmp/d', depth: 1024 })
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300))
    assert.equal(r.body.entries.length, 1024)
    assert.equal(r.body.entries.at(-1).path, '/tmp/d' + '/a'.repeat(1024))
    assert.equal((await fetch(URL_ + '/health')).status, 200)   // still serving
  } finally { await kill(s.sandboxID) }
})

// A raw connection that asks for a download and then reads nothing more (its socket stays open).
async function stalledDownload(s, path) {
  const u = hostURL()
  const sock = net.connect(Number(u.port), u.hostname)
  await new Promise((r, j) => { sock.once('connect', r); sock.once('error', j) })
  sock.on('error', () => {})
  const first = new Promise((r) => sock.once('data', r))
  sock.write(`GET /files?path=${encodeURIComponent(path)} HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ${s.sandboxID}\r\n` +
    (s.envdAccessToken ? `X-Access-Token: ${s.envdAccessToken}\r\n` : '') + '\r\n')
  await first
  sock.pause()                      // from now on nothing is read: the server's queue fills up
  return sock
}

test('a client that stops reading does not block kill or expiry', { timeout: 240_000 }, async () => {
  const a = await create(), b = await create()
  const socks = []
  try {
    const big = Buffer.alloc(48 << 20, 120)
    for (const s of [a, b]) assert.equal((await upload(s, '/tmp/big', big)).status, 200)
    socks.push(await stalledDownload(a, '/tmp/big'), await stalledDownload(b, '/tmp/big'))
    // kill: answers once the sandbox is destroyed, despite the stalled stream
    assert.equal((await kill(a.sandboxID)).status, 204)
    assert.equal((await api(`/sandboxes/${a.sandboxID}`)).status, 404)
    // expiry: the lease runs out with a stalled stream; the sandbox goes away all the same
    assert.equal((await api(`/sandboxes/${b.sandboxID}/timeout`, { method: 'POST', body: JSON.stringify({ timeout: 1 }) })).status, 204)
    while ((await api(`/sandboxes/${b.sandboxID}`)).status !== 404) await new Promise((r) => setTimeout(r, 200))
    const c = await create({ timeout: 1 })   // and the expiry thread still serves other leases
    while ((await api(`/sandboxes/${c.sandboxID}`)).status !== 404) await new Promise((r) => setTimeout(r, 200))
  } finally {
    for (const k of socks) k.destroy()
    await kill(a.sandboxID); await kill(b.sandboxID)
  }
})

// Opens a WatchDir stream; resolves with {res, ctl} once the server answered (start or error).
async function openWatch(s, path, extra = {}) {
  const ctl = new AbortController()
  const res = await envd(s, '/filesystem.Filesystem/WatchDir', {
    method: 'POST', body: envelope({ path, ...extra }), signal: ctl.signal,
    headers: { 'Content-Type': 'application/connect+json' },
  })
  const reader = res.body.getReader()
  const { value } = await reader.read()   // the first envelope: start, or the end-stream error
  const env = envelopes(Buffer.from(value))
  return { ctl, first: env[0] }
}

test('WatchDir streams are capped per sandbox and over all sandboxes; watches per stream too', { timeout: 240_000 }, async () => {
  const boxes = []
  const open = []
  try {
    for (let i = 0; i < 5; i++) boxes.push(await create())
    // per sandbox: 8, the 9th is refused
    for (let i = 0; i < 8; i++) {
      const w = await openWatch(boxes[0], '/tmp')
      assert.deepEqual(w.first.msg, { start: {} }); open.push(w)
    }
    let w = await openWatch(boxes[0], '/tmp')
    assert.equal(w.first.flags, 2); assert.equal(w.first.msg.error.code, 'resource_exhausted')
    assert.match(w.first.msg.error.message, /this sandbox already has 8 WatchDir streams/)
    // over all sandboxes: at most 32 (fewer on a host with a small inotify instance limit)
    let refused = null
    for (let b = 1; b < 5 && !refused; b++) {
      for (let i = 0; i < 8; i++) {
        w = await openWatch(boxes[b], '/tmp')
        if (w.first.flags === 2) { refused = w.first.msg.error; break }
        open.push(w)
      }
    }
    assert.ok(refused, 'no global limit')
    assert.equal(refused.code, 'resource_exhausted'); assert.match(refused.message, /over all sandboxes/)
    assert.ok(open.length <= 32)
    for (const o of open) o.ctl.abort()
    open.length = 0
    // watches per stream: a recursive watch over more than 1024 directories is refused clearly
    for (let i = 0; i < 1030; i++) assert.equal((await rpc(boxes[4], 'MakeDir', { path: `/tmp/many/d${i}` })).status, 200)
    for (;;) {   // the aborted streams give their slots back as their handlers notice
      w = await openWatch(boxes[4], '/tmp/many', { recursive: true })
      if (!/over all sandboxes|already has/.test(w.first.msg.error?.message ?? '')) break
      await new Promise((r) => setTimeout(r, 200))
    }
    assert.equal(w.first.msg.error?.code, 'resource_exhausted', JSON.stringify(w.first))
    assert.match(w.first.msg.error.message, /more than 1024 directories/)
  } finally {
    for (const o of open) o.ctl.abort()
    for (const b of boxes) await kill(b.sandboxID)
  }
})

// Raw request head claiming a body of `length` bytes, none of which is sent (with `expect`, the
// client waits for "100 Continue" as HTTP allows); returns the head of the answer, which must
// come without the body: the old server waited for the whole body, or sent "100 Continue".
async function earlyAnswer(head, length, expect = true) {
  const u = hostURL()
  const sock = net.connect(Number(u.port), u.hostname)
  sock.on('error', () => {})
  await new Promise((r, j) => { sock.once('connect', r); sock.once('error', j) })
  const answer = new Promise((r) => { let b = ''; sock.on('data', (d) => { b += d; if (b.includes('\r\n\r\n')) r(b) }) })
  sock.write(`${head}Host: x\r\nContent-Length: ${length}\r\nContent-Type: application/octet-stream\r\n${expect ? 'Expect: 100-continue\r\n' : ''}\r\n`)
  const a = await answer
  sock.destroy()
  return a
}

test('unauthenticated large bodies are refused before they are read', { timeout: 120_000 }, async () => {
  const s = await create({ secure: true })
  try {
    const big = 500 << 20
    let a = await earlyAnswer(`POST /files?path=/tmp/x HTTP/1.1\r\nE2b-Sandbox-Id: ${s.sandboxID}\r\n`, big, false)
    assert.match(a, /^HTTP\/1\.1 401/); assert.match(a, /missing signature query parameter/)
    a = await earlyAnswer(`POST /files?path=/tmp/x&signature=v1_bogus HTTP/1.1\r\n`, big)
    assert.match(a, /^HTTP\/1\.1 401/); assert.match(a, /invalid signature/)
    a = await earlyAnswer('POST /sandboxes HTTP/1.1\r\nX-API-KEY: e2b_1111111111111111111111111111111111111111\r\n', 7 << 20)
    assert.match(a, /^HTTP\/1\.1 401/); assert.match(a, /invalid API key/)
    a = await earlyAnswer(`POST /filesystem.Filesystem/Stat HTTP/1.1\r\nE2b-Sandbox-Id: ${s.sandboxID}\r\n`, 7 << 20)
    assert.match(a, /^HTTP\/1\.1 401/)
    a = await earlyAnswer('POST /files?path=/tmp/x HTTP/1.1\r\nE2b-Sandbox-Id: inosuchsandbox000000000\r\n', big)
    assert.match(a, /^HTTP\/1\.1 502/)
    assert.equal((await fetch(URL_ + '/health')).status, 200)
  } finally { await kill(s.sandboxID) }
})

test('multipart uploads: at most 1000 parts, duplicates still refused', async () => {
  const s = await create()
  try {
    const form = new FormData()
    for (let i = 0; i < 1001; i++) form.append('file', new Blob(['x']), `/tmp/parts/f${i}`)
    let r = await json(await envd(s, '/files', { method: 'POST', body: form }))
    assert.equal(r.status, 400); assert.match(r.body.message, /more than 1000 files in one upload/)
    const ok = new FormData()
    for (let i = 0; i < 1000; i++) ok.append('file', new Blob(['y']), `/tmp/parts/g${i}`)
    r = await json(await envd(s, '/files', { method: 'POST', body: ok }))
    assert.equal(r.status, 200); assert.equal(r.body.length, 1000)
    const dup = new FormData()
    dup.append('file', new Blob(['a']), '/tmp/parts/same'); dup.append('file', new Blob(['b']), '/tmp/parts/other')
    dup.append('file', new Blob(['c']), '/tmp/parts/same')
    r = await json(await envd(s, '/files', { method: 'POST', body: dup }))
    assert.equal(r.status, 400); assert.match(r.body.message, /'\/tmp\/parts\/same' is given more than once/)
  } finally { await kill(s.sandboxID) }
})

test('RPC errors: a move across mount points says so', async () => {
  const s = await create()
  try {
    assert.equal((await upload(s, '/tmp/mv.txt', 'm')).status, 200)
    const r = await rpc(s, 'Move', { source: '/tmp/mv.txt', destination: '/dev/shm/mv.txt' })
    assert.equal(r.body.code, 'invalid_argument'); assert.match(r.body.message, /cannot cross mount points/)
  } finally { await kill(s.sandboxID) }
})

test('--exit-with-parent: sandboxd exits when the process that started it dies', { timeout: 120_000 }, async () => {
  const bin = sandboxdBin()
  const dir = mkdtempSync(join(tmpdir(), 'sbxd-parent-'))
  let sh, pid
  try {
    // sh starts sandboxd, reports its pid, and waits; then sh is killed outright.
    writeFileSync(join(dir, 'key'), KEY + '\n', { mode: 0o600 })   // never on a command line
    sh = spawn('sh', ['-c', `"$0" --listen 127.0.0.1:0 --api-key-file "$1/key" --state-dir "$1" --exit-with-parent >"$1/out" 2>&1 & echo $!; wait`, bin, dir],
      { stdio: ['ignore', 'pipe', 'inherit'] })
    pid = Number(await new Promise((r) => sh.stdout.once('data', (d) => r(String(d).trim()))))
    const alive = (p) => { try { process.kill(p, 0); return true } catch { return false } }
    const out = () => existsSync(join(dir, 'out')) ? readFileSync(join(dir, 'out'), 'utf8') : ''
    while (!out().includes('listening') && alive(pid)) await new Promise((r) => setTimeout(r, 100))
    assert.ok(alive(pid), `sandboxd did not start: ${out()}`)
    sh.kill('SIGKILL')
    while (alive(pid)) await new Promise((r) => setTimeout(r, 100))
    assert.match(readFileSync(join(dir, 'out'), 'utf8'), /Terminated: destroying every sandbox/)
  } finally {
    try { sh?.kill('SIGKILL') } catch {}
    try { if (pid) process.kill(pid, 'SIGTERM') } catch {}
    sh?.stdout.destroy()
    rmSync(dir, { recursive: true, force: true })
  }
})
