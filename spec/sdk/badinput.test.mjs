// Bad input on the wire (raw fetch): every mistake gets a clear, coded error and nothing escapes.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { existsSync } from 'node:fs'
import { T, newSandbox, apiFetch, envdFetch, connectStream, connectUnary, requireEnv, uniq, assertApiError as assertError, postJson, SDK_V2, Sandbox, AuthenticationError, SandboxError, FileNotFoundError } from './helpers.mjs'

test('malformed JSON and wrongly typed fields on POST /sandboxes → 400 {code,message}', T, async () => {
  await assertError(await postJson('/sandboxes', '{"templateID": "base",'), 400, 'truncated JSON')
  await assertError(await postJson('/sandboxes', 'not json at all'), 400, 'not JSON')
  await assertError(await postJson('/sandboxes', '[1,2,3]'), 400, 'array body')
  await assertError(await postJson('/sandboxes', '{"templateID":"base","timeout":"soon"}'), 400, 'string timeout')
  await assertError(await postJson('/sandboxes', '{"templateID":"base","metadata":{"k":1}}'), 400, 'non-string metadata')
  await assertError(await postJson('/sandboxes', '{"templateID":"base","envVars":"A=B"}'), 400, 'envVars not an object')
  await assertError(await postJson('/sandboxes', '{"templateID":"base","timeout":-5}'), 400, 'negative timeout')
})

test('unknown template → 404 "template \'x\' not found" (E2B\'s answer); a malformed one → 400 naming templateID', T, async () => {
  const name = 'no-such-template-' + uniq('')
  const body = await assertError(await postJson('/sandboxes', JSON.stringify({ templateID: name, timeout: 30 })), 404, 'unknown template')
  assert.ok(body.message.startsWith(`template '${name}' not found`), body.message)
  await assert.rejects(Sandbox.create('no-such-template', { timeoutMs: 30_000 }), SandboxError)
  // a tag names a build of a template (template_tags.test.mjs): an unknown one is a 404 naming it
  const tagged = await assertError(await postJson('/sandboxes', JSON.stringify({ templateID: `${name}:v2`, timeout: 30 })), 404, 'unknown name:tag')
  assert.match(tagged.message, new RegExp(`^template '${name}(:v2)?' not found`), tagged.message)
  for (const bad of ['has space', 'team/name', 'name:BAD TAG', 'name:', '', 'x'.repeat(129)]) {
    const b = await assertError(await postJson('/sandboxes', JSON.stringify({ templateID: bad, timeout: 30 })), 400, `templateID ${JSON.stringify(bad)}`)
    assert.match(b.message, /^field 'templateID': /, b.message)
  }
})

test('unknown sandbox on every control-plane route → 404 JSON', T, async () => {
  const id = 'nosuchsandbox' + uniq('')
  await assertError(await apiFetch(`/sandboxes/${id}`), 404, 'GET')
  await assertError(await apiFetch(`/sandboxes/${id}`, { method: 'DELETE' }), 404, 'DELETE')
  await assertError(await postJson(`/sandboxes/${id}/timeout`, '{"timeout":30}'), 404, 'timeout')
  await assertError(await postJson(`/sandboxes/${id}/connect`, '{"timeout":30}'), 404, 'connect')
  await assertError(await apiFetch(`/sandboxes/${id}/pause`, { method: 'POST' }), 404, 'pause')
  await assertError(await apiFetch('/no/such/route'), 404, 'unknown route')
})

test('missing or wrong X-API-KEY → 401 JSON; the SDK raises AuthenticationError', T, async () => {
  await assertError(await apiFetch('/v2/sandboxes', { headers: { 'X-API-KEY': undefined } }), 401, 'missing key')
  await assertError(await apiFetch('/v2/sandboxes', { headers: { 'X-API-KEY': 'e2b_' + 'f'.repeat(40) } }), 401, 'wrong key')
  await assertError(await postJson('/sandboxes', '{"templateID":"base"}', { 'X-API-KEY': 'e2b_' + '1'.repeat(40) }), 401, 'wrong key on create')
  await assert.rejects(Sandbox.create('base', { apiKey: 'e2b_' + 'a'.repeat(40), timeoutMs: 30_000 }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey: 'e2b_' + 'b'.repeat(40) }).nextItems(), AuthenticationError)
})

test('envd: wrong access token → 401; unknown sandbox → 502 JSON', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  const r = await connectUnary(sbx, 'process.Process/List', {}, { token: 'bad-' + uniq('') })
  assert.equal(r.status, 401)
  const s = await connectStream(sbx, 'process.Process/Start', { process: { cmd: '/bin/true' } }, { token: 'bad' })
  assert.ok(s.status === 401 || s.end?.error?.code === 'unauthenticated', `stream with bad token: ${JSON.stringify(s)}`)
  const ghost = { sandboxId: 'ghost' + uniq(''), envdAccessToken: undefined }
  const g = await envdFetch(ghost, '/health')
  assert.equal(g.status, 502)
  const gb = await g.json()
  assert.equal(gb.code, 502)
  assert.ok(gb.message)
})

/** Sends `size` bytes with Content-Length; resolves with the response even if the server stops reading early. */
function sendLarge(base, path, size, headers) {
  const u = new URL(base + path)
  return new Promise((resolve, reject) => {
    let done = false
    const req = http.request(
      { host: u.hostname, port: u.port, path: u.pathname + u.search, method: 'POST', headers: { 'Content-Length': size, ...headers } },
      (res) => {
        let body = ''
        res.setEncoding('utf8')
        res.on('data', (d) => (body += d))
        res.on('end', () => {
          done = true
          resolve({ status: res.statusCode, headers: res.headers, body })
        })
      },
    )
    req.on('error', (e) => {
      if (!done) setTimeout(() => !done && reject(e), 2000)
    })
    const chunk = Buffer.alloc(1 << 20, 0x20)
    let sent = 0
    const pump = () => {
      while (sent < size) {
        const n = Math.min(chunk.length, size - sent)
        sent += n
        if (!req.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return req.once('drain', pump)
      }
      req.end()
    }
    pump()
  })
}

test('oversize control-plane body → 413 with a clear JSON error; the server keeps serving', T, async () => {
  const { api, key } = requireEnv()
  const r = await sendLarge(api, '/sandboxes', 64 << 20, { 'Content-Type': 'application/json', 'X-API-KEY': key })
  assert.equal(r.status, 413)
  const body = JSON.parse(r.body)
  assert.equal(body.code, 413)
  assert.ok(typeof body.message === 'string' && body.message.length > 0)
  const ok = await apiFetch('/v2/sandboxes')
  assert.equal(ok.status, 200)
})

test('oversize envd RPC body → an error, and the sandbox keeps working', T, async (t) => {
  const sbx = await newSandbox(t)
  const { sbx: base } = requireEnv()
  const r = await sendLarge(base, '/filesystem.Filesystem/Stat', 64 << 20, {
    'Content-Type': 'application/json',
    'Connect-Protocol-Version': '1',
    'E2b-Sandbox-Id': sbx.sandboxId,
    ...(sbx.envdAccessToken ? { 'X-Access-Token': sbx.envdAccessToken } : {}),
  })
  const status = r.status
  assert.ok(typeof status === 'number' && status >= 400, `oversize RPC answered ${status}`)
  assert.equal((await sbx.commands.run('echo still-ok')).stdout, 'still-ok\n')
})

test('path traversal in /files and RPCs stays inside the sandbox', T, async (t) => {
  const sbx = await newSandbox(t)
  const inside = (await sbx.commands.run('cat /etc/passwd')).stdout
  for (const p of ['../../etc/passwd', '../../../../../../../../etc/passwd', '/../../etc/passwd', '~/../../etc/passwd', '/home/user/../../../etc/passwd']) {
    assert.equal(await sbx.files.read(p), inside, `read ${p}`)
  }
  // raw, with percent-encoded dots and slashes
  const raw = await envdFetch(sbx, '/files?path=%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd')
  assert.equal(raw.status, 200)
  assert.equal(await raw.text(), inside)

  // writes outside the sandbox root land inside it
  const name = uniq('mb-trav-')
  await sbx.files.write(`../../../../../../tmp/${name}`, 'inside', { user: 'root' })
  assert.equal(existsSync(`/tmp/${name}`), false, 'traversal write reached the host /tmp')
  assert.equal((await sbx.commands.run(`cat /tmp/${name}`)).stdout, 'inside')

  // absolute host paths name sandbox paths, and the host ones are not there
  await assert.rejects(sbx.files.read('/work/main/CMakeLists.txt', { user: 'root' }), FileNotFoundError)
  assert.equal(await sbx.files.exists('/work/main', { user: 'root' }), false)

  // ListDir of "/.." is the sandbox root
  const root = (await sbx.files.list('/', { user: 'root' })).map((e) => e.name)
  const up = (await sbx.files.list('/../../..', { user: 'root' })).map((e) => e.name)
  assert.deepEqual(up, root)
  assert.ok(!root.includes('work'), `sandbox / shows the host /work: ${root.join(' ')}`)
  const moved = await sbx.files.rename(`/tmp/${name}`, `../../../../../../../../tmp/${name}-2`, { user: 'root' })
  assert.equal(moved.path, `/tmp/${name}-2`)
  assert.equal(existsSync(`/tmp/${name}-2`), false)
})

test('invalid cwd → invalid_argument on the wire', T, async (t) => {
  const sbx = await newSandbox(t)
  const s = await connectStream(sbx, 'process.Process/Start', {
    process: { cmd: '/bin/bash', args: ['-l', '-c', 'pwd'], cwd: '/no/such/dir' },
    stdin: false,
  })
  assert.equal(s.status, 200)
  assert.match(s.contentType ?? '', /application\/connect\+json/)
  assert.equal(s.end?.error?.code, 'invalid_argument', JSON.stringify(s))
  assert.ok(s.end.error.message)
  assert.ok(!s.messages.some((m) => m.event?.data), 'nothing ran')
})

test('malformed Connect requests → coded Connect errors', T, async (t) => {
  const sbx = await newSandbox(t)
  const bad = await envdFetch(sbx, '/filesystem.Filesystem/Stat', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
    body: '{"path": ',
  })
  assert.ok(bad.status >= 400 && bad.status < 500, `status ${bad.status}`)
  const bb = await bad.json()
  assert.equal(typeof bb.code, 'string')
  assert.ok(['invalid_argument', 'internal'].includes(bb.code), bb.code)
  const unknown = await connectUnary(sbx, 'filesystem.Filesystem/NoSuchMethod', {})
  assert.ok(unknown.status === 404 || unknown.body?.code === 'unimplemented', JSON.stringify(unknown))
  const missing = await connectUnary(sbx, 'process.Process/SendSignal', { process: { pid: 999999 }, signal: 'SIGNAL_SIGKILL' })
  assert.equal(missing.status, 404)
  assert.equal(missing.body.code, 'not_found')
})

test('an unknown user (Basic auth or username=) → unauthenticated / 401', T, async (t) => {
  const sbx = await newSandbox(t)
  const auth = { Authorization: 'Basic ' + Buffer.from('nosuchuser:').toString('base64') }
  const s = await connectStream(sbx, 'process.Process/Start', { process: { cmd: '/bin/true' }, stdin: false }, { headers: auth })
  assert.ok(s.end?.error?.code === 'unauthenticated' || s.status === 401, JSON.stringify(s))
  const u = await connectUnary(sbx, 'filesystem.Filesystem/Stat', { path: '/' }, { headers: auth })
  assert.equal(u.status, 401)
  assert.equal(u.body.code, 'unauthenticated')
  const f = await envdFetch(sbx, '/files?path=%2Fetc%2Fhostname&username=nosuchuser')
  assert.equal(f.status, 401)
  assert.equal((await f.json()).code, 401)
})

test('a paused sandbox answers envd calls with 502 JSON until resumed', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.pause()
  const r = await connectUnary(sbx, 'process.Process/List', {})
  assert.equal(r.status, 502)
  assert.equal(r.body.code, 502)
  const f = await envdFetch(sbx, '/files?path=.bashrc')
  assert.equal(f.status, 502)
  await sbx.connect()
  const ok = await connectUnary(sbx, 'process.Process/List', {})
  assert.equal(ok.status, 200)
})

test('volumeMounts naming a volume that does not exist → 400 naming the field, nothing created', T, async () => {
  const res = await postJson(
    '/sandboxes',
    JSON.stringify({ templateID: 'base', timeout: 30, volumeMounts: [{ name: 'no-such-volume', path: '/mnt/v' }] }),
  )
  if (res.ok) {
    const made = await res.json()
    await apiFetch(`/sandboxes/${made.sandboxID}`, { method: 'DELETE' })
    assert.fail('volumeMounts was silently accepted')
  }
  const body = await assertError(res, 400, 'unknown volume')
  assert.equal(body.message, "field 'volumeMounts[0].name': volume 'no-such-volume' not found")
})

test('upload onto a FIFO → 400 "not a regular file"; the FIFO is never opened', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.commands.run('mkfifo /tmp/pipe && chmod 666 /tmp/pipe')
  const res = await fetch(await sbx.uploadUrl('/tmp/pipe'), { method: 'POST', body: 'x', headers: { 'Content-Type': 'application/octet-stream' } })
  const body = await assertError(res, 400, 'FIFO upload')
  assert.match(body.message, /'\/tmp\/pipe' is not a regular file/)
  await assert.rejects(sbx.files.write('/tmp/pipe', 'x'))
  assert.equal((await sbx.commands.run('test -p /tmp/pipe && echo fifo')).stdout.trim(), 'fifo')
})

test('signed URLs of a sandbox created without secure: true → 401 naming the reason', T, async (t) => {
  if (SDK_V2) return t.skip('the current SDK has no secure option: its sandboxes are always secure (controlplane_v2.test.mjs)')
  const sbx = await newSandbox(t, { secure: false })
  for (const [method, url] of [['POST', await sbx.uploadUrl('/tmp/x')], ['GET', await sbx.downloadUrl('/etc/hostname')]]) {
    assert.ok(!new URL(url).searchParams.get('signature'), 'no signature without secure: true')
    const res = await fetch(url, { method, ...(method === 'POST' ? { body: 'x', headers: { 'Content-Type': 'application/octet-stream' } } : {}) })
    const body = await assertError(res, 401, 'unsigned URL')   // 401: the same URL as a secure one without its signature
    assert.match(body.message, /signed URLs need a sandbox created with secure: true/)
  }
})

test('create fields sandboxd cannot enforce → 400 whose message names the field', T, async () => {
  const cases = [
    ['network.rules', { network: { rules: { 'api.example.com': [{ transform: { headers: { Authorization: 'Bearer ${e2b.identity.tokens.aws}' } } }] } } }],
    ['mcp', { mcp: { 'some-server': {} } }],
    ['autoResume', { autoPause: true, autoResume: { enabled: 'yes' } }],
    ['noSuchField', { noSuchField: 1 }],
  ]
  for (const [field, extra] of cases) {
    const res = await postJson('/sandboxes', JSON.stringify({ templateID: 'base', timeout: 30, ...extra }))
    if (res.ok) {
      const made = await res.json()
      await apiFetch(`/sandboxes/${made.sandboxID}`, { method: 'DELETE' })
      assert.fail(`'${field}' was silently accepted`)
    }
    const body = await assertError(res, 400, field)
    assert.ok(body.message.includes(`'${field}'`), `${field}: message does not name the field: ${body.message}`)
  }
  // what the SDK itself sends by default (autoResume {enabled: false}, network/mcp undefined) is accepted
  const ok = await postJson('/sandboxes', JSON.stringify({ templateID: 'base', timeout: 30, autoPause: false, autoResume: { enabled: false } }))
  assert.equal(ok.status, 201)
  await apiFetch(`/sandboxes/${(await ok.json()).sandboxID}`, { method: 'DELETE' })
})

test('unimplemented control-plane routes → 501 {code: 501, message}', T, async () => {
  const id = 'nosuchsandbox' + uniq('')
  const routes = [
    ['GET', '/snapshots/x'],
    ['POST', '/templates', '{}'],
    ['GET', '/v2/templates'],
    ['PATCH', '/v2/templates/x', '{}'],
    ['GET', '/v3/templates/x'],
  ]
  for (const [method, p, body] of routes) {
    const res = await apiFetch(p, { method, ...(body ? { body, headers: { 'Content-Type': 'application/json' } } : {}) })
    const b = await assertError(res, 501, `${method} ${p}`)
    assert.match(b.message, /not implemented/, `${method} ${p}: ${b.message}`)
  }
  // the API key is still checked first
  await assertError(await apiFetch('/templates', { headers: { 'X-API-KEY': undefined } }), 401, 'unauthenticated /templates')
})
