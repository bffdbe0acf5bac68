// Wire-level checks of sandboxd without the SDK: control plane, envd auth and routing, /files,
// signing, filesystem RPCs, bad input. Uses E2B_API_URL/E2B_API_KEY when set, else starts
// build/bin/sandboxd itself on a free port. Run: node --test tests/sandboxd/
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { gzipSync, gunzipSync } from 'node:zlib'
import { useSandboxd, URL_, api, json, create, kill, envd, rpc, upload, envelope, envelopes } from './support.mjs'

useSandboxd('sbxd-wire-')

const sign = (path, op, user, token, exp) =>
  'v1_' + createHash('sha256').update(`${path}:${op}:${user}:${token}${exp ? ':' + exp : ''}`).digest('base64').replace(/=+$/, '')

test('control plane: auth, validation and error bodies carry code == status', async () => {
  assert.equal((await fetch(URL_ + '/health')).status, 200)   // readiness without a key
  let r = await json(await fetch(URL_ + '/v2/sandboxes'))
  assert.equal(r.status, 401); assert.equal(r.body.code, 401)
  r = await json(await api('/sandboxes', { method: 'POST', body: '{"templateID":' }))
  assert.equal(r.status, 400); assert.equal(r.body.code, 400); assert.match(r.body.message, /malformed JSON/)
  r = await json(await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'python' }) }))
  assert.equal(r.status, 404); assert.equal(r.body.code, 404); assert.match(r.body.message, /template 'python' not found/)
  for (const [field, value] of [['network', { rules: { 'api.example.com': [{ transform: { headers: { Authorization: 'Bearer ${e2b.identity.tokens.aws}' } } }] } }], ['mcp', {}], ['volumeMounts', {}], ['volumeMounts', [{ name: 'v', path: '/v' }]]]) {
    r = await json(await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', [field]: value }) }))
    assert.equal(r.status, 400); assert.match(r.body.message, new RegExp(`'${field}[\\]\\[.a-z0-9]*'`))
  }
  // an empty network config asks for nothing: taken
  r = await json(await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', network: {}, volumeMounts: [] }) }))
  assert.equal(r.status, 201)
  assert.equal((await kill(r.body.sandboxID)).status, 204)
  r = await json(await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', autoResume: { enabled: 'yes' } }) }))
  assert.equal(r.status, 400); assert.match(r.body.message, /autoResume/)
  r = await json(await api('/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', timeout: -1 }) }))
  assert.equal(r.status, 400); assert.match(r.body.message, /timeout/)
  r = await json(await api('/sandboxes', { method: 'POST', body: 'x'.repeat(9 << 20) }))
  assert.equal(r.status, 413); assert.equal(r.body.code, 413)
  r = await json(await api('/sandboxes/inope'))
  assert.equal(r.status, 404); assert.equal(r.body.code, 404)
  r = await json(await kill('inope'))
  assert.equal(r.body.code, 404)
})

test('create, info, list with metadata filter and pagination, newest first', async () => {
  const tag = 'w' + Math.random().toString(36).slice(2)
  const a = await create({ metadata: { tag } })
  const b = await create({ metadata: { tag } })
  try {
    assert.match(a.sandboxID, /^i[a-z0-9]{20}$/)
    const [maj, min, pat] = a.envdVersion.split('.').map(Number)
    assert.ok(maj > 0 || min > 6 || (min === 6 && pat >= 3), a.envdVersion)
    const info = await json(await api(`/sandboxes/${a.sandboxID}`))
    assert.equal(info.body.state, 'running'); assert.deepEqual(info.body.metadata, { tag })
    const q = `metadata=${encodeURIComponent(new URLSearchParams({ [encodeURIComponent('tag')]: encodeURIComponent(tag) }).toString())}`
    let p = await json(await api(`/v2/sandboxes?${q}&state=running&limit=1`))
    assert.deepEqual(p.body.map((s) => s.sandboxID), [b.sandboxID])
    const next = p.headers.get('x-next-token')
    assert.ok(next)
    p = await json(await api(`/v2/sandboxes?${q}&state=running&limit=1&nextToken=${next}`))
    assert.deepEqual(p.body.map((s) => s.sandboxID), [a.sandboxID])
    assert.ok(!p.headers.get('x-next-token'))
    p = await json(await api(`/v2/sandboxes?${q}&state=paused`))
    assert.deepEqual(p.body, [])
    p = await json(await api(`/v2/sandboxes?state=frozen`))
    assert.equal(p.status, 400)
  } finally { await kill(a.sandboxID); await kill(b.sandboxID) }
})

test('lease: connect never shortens, timeout does; pause makes envd 502 until connect resumes', async () => {
  const s = await create({ timeout: 100 })
  try {
    const end0 = Date.parse((await json(await api(`/sandboxes/${s.sandboxID}`))).body.endAt)
    let r = await api(`/sandboxes/${s.sandboxID}/connect`, { method: 'POST', body: JSON.stringify({ timeout: 10 }) })
    assert.equal(r.status, 200)
    const end1 = Date.parse((await json(await api(`/sandboxes/${s.sandboxID}`))).body.endAt)
    assert.ok(end1 >= end0)
    r = await api(`/sandboxes/${s.sandboxID}/timeout`, { method: 'POST', body: JSON.stringify({ timeout: 10 }) })
    assert.equal(r.status, 204)
    const end2 = Date.parse((await json(await api(`/sandboxes/${s.sandboxID}`))).body.endAt)
    assert.ok(end2 < end1)
    r = await api(`/sandboxes/${s.sandboxID}/pause`, { method: 'POST' })
    assert.equal(r.status, 204)
    assert.equal((await json(await api(`/sandboxes/${s.sandboxID}/pause`, { method: 'POST' }))).body.code, 409)
    const h = await json(await envd(s, '/health'))
    assert.equal(h.status, 502); assert.equal(h.body.code, 502); assert.equal(h.body.sandboxId, s.sandboxID)
    r = await api(`/sandboxes/${s.sandboxID}/connect`, { method: 'POST', body: JSON.stringify({ timeout: 60 }) })
    assert.equal(r.status, 201)
    assert.equal((await envd(s, '/health')).status, 204)
  } finally { await kill(s.sandboxID) }
  assert.equal((await envd(s, '/health')).status, 502)
  assert.equal((await json(await api(`/sandboxes/${s.sandboxID}/connect`, { method: 'POST', body: '{}' }))).body.code, 404)
})

test('expiry destroys the sandbox', async () => {
  const s = await create({ timeout: 1 })
  let status
  for (let i = 0; i < 100; i++) {   // polls until gone; the bound only stops a hung test
    status = (await api(`/sandboxes/${s.sandboxID}`)).status
    if (status === 404) break
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.equal(status, 404)
})

test('envd auth: token on RPC, unknown user, signed /files URLs with exact messages', async () => {
  const s = await create({ secure: true })
  try {
    assert.ok(s.envdAccessToken)
    let r = await json(await fetch(URL_ + '/filesystem.Filesystem/Stat', { method: 'POST', body: '{}', headers: { 'E2b-Sandbox-Id': s.sandboxID, 'Content-Type': 'application/json' } }))
    assert.equal(r.status, 401)
    r = await rpc(s, 'Stat', { path: '~' }, { Authorization: 'Basic ' + Buffer.from('mallory:').toString('base64') })
    assert.equal(r.status, 401); assert.equal(r.body.code, 'unauthenticated'); assert.match(r.body.message, /mallory/)
    assert.equal((await upload(s, 'sig.txt', 'signed')).status, 200)
    const url = (q) => URL_ + '/files?' + new URLSearchParams(q).toString()   // no routing header at all
    let f = await fetch(url({ path: 'sig.txt', signature: sign('sig.txt', 'read', '', s.envdAccessToken) }))
    assert.equal(f.status, 200); assert.equal(await f.text(), 'signed')
    const past = Math.floor(Date.now() / 1000) - 10
    f = await fetch(url({ path: 'sig.txt', signature: sign('sig.txt', 'read', '', s.envdAccessToken, past), signature_expiration: String(past) }))
    assert.equal(f.status, 401); assert.deepEqual(await f.json(), { code: 401, message: 'signature is already expired' })
    f = await fetch(url({ path: 'sig.txt', signature: sign('other.txt', 'read', '', s.envdAccessToken) }))
    assert.equal(f.status, 401); assert.deepEqual(await f.json(), { code: 401, message: 'invalid signature' })
    f = await envd({ sandboxID: s.sandboxID }, '/files?path=sig.txt')
    assert.deepEqual(await f.json(), { code: 401, message: 'missing signature query parameter' })
    const form = new FormData(); form.append('file', 'root content')
    f = await fetch(url({ path: 'up.txt', username: 'root', signature: sign('up.txt', 'write', 'root', s.envdAccessToken) }), { method: 'POST', body: form })
    assert.equal(f.status, 200); assert.deepEqual(await f.json(), [{ path: '/root/up.txt', name: 'up.txt', type: 'file' }])
  } finally { await kill(s.sandboxID) }
})

test('/files: multipart, octet-stream, gzip both ways, metadata, empty file, errors', async () => {
  const s = await create()
  try {
    const form = new FormData()
    form.append('file', new Blob(['one']), 'multi/a.txt')
    form.append('file', new Blob([]), '/tmp/empty.txt')
    let r = await json(await envd(s, '/files', { method: 'POST', body: form, headers: { 'X-Metadata-Owner': 'Me' } }))
    assert.equal(r.status, 200, JSON.stringify(r.body))
    assert.deepEqual(r.body, [
      { path: '/home/user/multi/a.txt', name: 'a.txt', type: 'file', metadata: { owner: 'Me' } },
      { path: '/tmp/empty.txt', name: 'empty.txt', type: 'file', metadata: { owner: 'Me' } },
    ])
    let g = await envd(s, '/files?path=/tmp/empty.txt')
    assert.equal(g.status, 200); assert.equal(g.headers.get('content-length'), '0')
    r = await json(await upload(s, 'z.txt', gzipSync(Buffer.from('zipped')), { 'Content-Encoding': 'gzip' }))
    assert.equal(r.status, 200)
    g = await envd(s, '/files?path=z.txt', { headers: { 'Accept-Encoding': 'gzip' } })
    assert.equal(await g.text(), 'zipped')   // fetch decodes Content-Encoding: gzip
    const st = await rpc(s, 'Stat', { path: 'multi/a.txt' })
    assert.equal(st.body.entry.owner, 'user'); assert.equal(st.body.entry.mode, 0o644)
    assert.deepEqual(st.body.entry.metadata, { owner: 'Me' })
    assert.equal((await upload(s, 'multi/a.txt', 'two')).status, 200)   // no metadata headers: the set is cleared
    assert.equal((await rpc(s, 'Stat', { path: 'multi/a.txt' })).body.entry.metadata, undefined)
    r = await json(await envd(s, '/files?path=nope.txt'))
    assert.equal(r.status, 404); assert.equal(r.body.code, 404)
    r = await json(await envd(s, '/files?path=/tmp'))
    assert.equal(r.status, 400); assert.match(r.body.message, /is a directory/)
    r = await json(await upload(s, 'x', 'data', { 'Content-Encoding': 'br' }))
    assert.equal(r.status, 400); assert.match(r.body.message, /Content-Encoding/)
    r = await json(await upload(s, 'x', 'not gzip', { 'Content-Encoding': 'gzip' }))
    assert.equal(r.status, 400)
    r = await json(await envd(s, '/files', { method: 'POST', body: 'x', headers: { 'Content-Type': 'application/octet-stream' } }))
    assert.equal(r.status, 400); assert.match(r.body.message, /path/)
    r = await json(await upload(s, '../../../../../../../tmp/../etc/../home/user/t.txt', 'inside'))
    assert.equal(r.status, 200); assert.equal(r.body[0].path, '/home/user/t.txt')
  } finally { await kill(s.sandboxID) }
})

test('filesystem RPCs: codes the SDK branches on, ListDir lexical pre-order', async () => {
  const s = await create()
  try {
    for (const p of ['d/b/x.txt', 'd/a.txt', 'd/b/a.txt', 'd/c/z.txt']) assert.equal((await upload(s, p, 'x')).status, 200)
    let r = await rpc(s, 'ListDir', { path: 'd', depth: 2 })
    assert.deepEqual(r.body.entries.map((e) => e.path), ['a.txt', 'b', 'b/a.txt', 'b/x.txt', 'c', 'c/z.txt'].map((p) => '/home/user/d/' + p))
    r = await rpc(s, 'ListDir', { path: 'd' })
    assert.deepEqual(r.body.entries.map((e) => e.name), ['a.txt', 'b', 'c'])
    assert.ok(r.body.entries.every((e) => !('symlinkTarget' in e) && !('metadata' in e)))
    r = await rpc(s, 'ListDir', { path: 'd/a.txt' })
    assert.equal(r.status, 400); assert.equal(r.body.code, 'invalid_argument')
    r = await rpc(s, 'Stat', { path: 'd/none' })
    assert.equal(r.status, 404); assert.equal(r.body.code, 'not_found')
    r = await rpc(s, 'MakeDir', { path: 'd/b' })
    assert.equal(r.status, 409); assert.equal(r.body.code, 'already_exists')
    r = await rpc(s, 'MakeDir', { path: 'n1/n2' })
    assert.equal(r.status, 200); assert.equal(r.body.entry.type, 'FILE_TYPE_DIRECTORY'); assert.equal(r.body.entry.mode, 0o755)
    r = await rpc(s, 'Move', { source: 'd/none', destination: 'x' })
    assert.equal(r.body.code, 'not_found')
    r = await rpc(s, 'Move', { source: 'd/a.txt', destination: 'moved/deep/a.txt' })
    assert.equal(r.body.entry.path, '/home/user/moved/deep/a.txt')
    assert.equal((await rpc(s, 'Remove', { path: 'd' })).status, 200)
    assert.equal((await rpc(s, 'Remove', { path: 'd' })).status, 200)   // missing is fine
    assert.equal((await rpc(s, 'Stat', { path: 'd' })).body.code, 'not_found')
    r = await rpc(s, 'Remove', { path: '' })   // "" would be the home directory
    assert.equal(r.body.code, 'invalid_argument')
    assert.equal((await rpc(s, 'Stat', { path: '~' })).status, 200)
    r = await rpc(s, 'Stat', { path: 7 })
    assert.equal(r.body.code, 'invalid_argument')
    r = await json(await envd(s, '/filesystem.Filesystem/Stat', { method: 'POST', body: '{"path":', headers: { 'Content-Type': 'application/json' } }))
    assert.equal(r.body.code, 'invalid_argument')
  } finally { await kill(s.sandboxID) }
})

test('WatchDir: start first, events with relative names, lifetime from Connect-Timeout-Ms', async () => {
  const s = await create()
  try {
    assert.equal((await rpc(s, 'MakeDir', { path: 'w/sub' })).status, 200)
    const res = await envd(s, '/filesystem.Filesystem/WatchDir', {
      method: 'POST', body: envelope({ path: 'w', recursive: true, includeEntry: true }),
      headers: { 'Content-Type': 'application/connect+json', 'Connect-Timeout-Ms': '3000' },
    })
    assert.equal(res.status, 200)
    const body = res.arrayBuffer()   // headers arrive after the watch is set up
    assert.equal((await upload(s, 'w/sub/f.txt', 'x')).status, 200)
    const env = envelopes(Buffer.from(await body))
    assert.deepEqual(env[0], { flags: 0, msg: { start: {} } })
    const ev = env.filter((e) => e.msg.filesystem).map((e) => e.msg.filesystem)
    assert.ok(ev.some((e) => e.name === 'sub/f.txt' && e.type === 'EVENT_TYPE_CREATE' && e.entry?.type === 'FILE_TYPE_FILE'), JSON.stringify(ev))
    assert.ok(ev.some((e) => e.name === 'sub/f.txt' && e.type === 'EVENT_TYPE_WRITE'))
    const last = env[env.length - 1]
    assert.equal(last.flags, 2); assert.equal(last.msg.error.code, 'deadline_exceeded')
    const miss = await envd(s, '/filesystem.Filesystem/WatchDir', { method: 'POST', body: envelope({ path: 'nope' }), headers: { 'Content-Type': 'application/connect+json' } })
    const m = envelopes(Buffer.from(await miss.arrayBuffer()))
    assert.equal(miss.status, 200); assert.equal(m.length, 1); assert.equal(m[0].flags, 2); assert.equal(m[0].msg.error.code, 'not_found')
  } finally { await kill(s.sandboxID) }
})
