// The secret API on the wire (issue 18 item 1), without the SDK: every refusal of /secrets with
// its status and the field it names, E2B's Secret shape, pages; and sandboxd refusing to start on
// a secret store whose key file is exposed, missing, damaged or another's (exit 1, the file named),
// then starting again once the key is back.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { useSandboxd, startSandboxd, sandboxdBin, URL_, KEY, api, json } from './support.mjs'

useSandboxd('sbxd-secrets-')

const uniq = (p) => p + Math.random().toString(36).slice(2, 10)

test('/secrets: the API key first, then 404/405, then each field named', async () => {
  for (const [method, p] of [['GET', '/secrets'], ['POST', '/secrets'], ['GET', '/secrets/x'], ['POST', '/secrets/x'], ['DELETE', '/secrets/x']]) {
    const r = await json(await fetch(URL_ + p, { method }))
    assert.equal(r.status, 401, `${method} ${p}`)
    assert.equal(r.body.code, 401)
  }
  const expect = async (res, status, re, what) => {
    const r = await json(res)
    assert.equal(r.status, status, `${what}: ${JSON.stringify(r.body)}`)
    assert.equal(r.body.code, status, what)
    assert.match(r.body.message, re, what)
    return r
  }
  await expect(await api('/secrets', { method: 'PUT' }), 405, /method PUT is not allowed on \/secrets/, 'PUT')
  await expect(await api('/secrets/x', { method: 'PATCH' }), 405, /method PATCH/, 'PATCH')
  await expect(await api('/secrets/x/y'), 404, /no endpoint GET \/secrets\/x\/y/, 'a deeper path')
  await expect(await api(`/secrets/${'n'.repeat(201)}`), 400, /of more than 200 bytes/, 'a long reference')
  for (const [method, body] of [['GET'], ['DELETE'], ['POST', '{"value":"v"}']])
    await expect(await api('/secrets/no-such-secret', { method, body }), 404, /secret 'no-such-secret' not found/, `${method} unknown`)
  const post = (body) => api('/secrets', { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) })
  const cases = [
    ['', /request body is required/],
    ['{"name":', /malformed JSON body at line 1, column \d+/],
    ['[]', /must be a JSON object/],
    [{ name: 'a', value: 'v', extra: 1 }, /field 'extra'/],
    [{ value: 'v' }, /field 'name' is required and must be a string/],
    [{ name: 7, value: 'v' }, /field 'name' is required/],
    [{ name: 'a' }, /field 'value' is required and must be a string/],
    [{ name: 'a', value: 1 }, /field 'value' is required/],
    [{ name: 'a', value: '' }, /field 'value' must not be empty/],
    [{ name: 'a', value: 'x\ny' }, /field 'value' holds a control character/],
    [{ name: 'a', value: 'x'.repeat(65537) }, /field 'value' is 65537 bytes: at most 65536/],
    [{ name: 'sec_a', value: 'v' }, /field 'name': the prefix 'sec_' is reserved/],
    [{ name: 'a b', value: 'v' }, /field 'name': ' ' \(character 2\) is not allowed/],
    [{ name: 'a', value: 'v', metadata: [] }, /field 'metadata' must be an object of strings/],
    [{ name: 'a', value: 'v', metadata: { k: 1 } }, /field 'metadata\.k' must be a string/],
    [{ name: 'a', value: 'v', metadata: { 'sandboxd.sandbox': 'UPPER' } }, /field 'metadata\.sandboxd\.sandbox' must be a sandbox id/],
    [{ name: 'a', value: 'v', metadata: { 'sandboxd.sandbox': 'inosuch' } }, /field 'metadata\.sandboxd\.sandbox': sandbox 'inosuch' not found/],
  ]
  for (const [body, re] of cases) await expect(await post(body), 400, re, JSON.stringify(body).slice(0, 80))
  // E2B's Secret, never the value; 409 for a name taken in any case; the update takes value and metadata only
  const name = uniq('wire-')
  const made = await json(await post({ name: name.toUpperCase(), value: 'the-value-itself', metadata: { a: 'b' } }))
  assert.equal(made.status, 201)
  assert.deepEqual(Object.keys(made.body).sort(), ['createdAt', 'currentVersion', 'metadata', 'name', 'secretID', 'updatedAt'])
  assert.equal(made.body.name, name)
  assert.equal(made.body.currentVersion, 1)
  assert.match(made.body.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  await expect(await post({ name, value: 'v' }), 409, new RegExp(`secret '${name}' already exists`), 'taken')
  await expect(await api(`/secrets/${name}`, { method: 'POST', body: JSON.stringify({ name: 'x', value: 'v' }) }), 400, /field 'name'/, 'update names')
  await expect(await api(`/secrets/${name}`, { method: 'POST', body: '{}' }), 400, /field 'value' is required/, 'update without value')
  const up = await json(await api(`/secrets/${made.body.secretID}`, { method: 'POST', body: JSON.stringify({ value: 'v2' }) }))
  assert.equal(up.status, 200)
  assert.equal(up.body.currentVersion, 2)
  assert.deepEqual(up.body.metadata, { a: 'b' })
  const got = await json(await api(`/secrets/${name}`))
  assert.equal(got.status, 200)
  assert.ok(!JSON.stringify(got.body).includes('the-value-itself'))
  // pages: limit and nextToken, refused when out of range or not ours
  for (const q of ['limit=0', 'limit=101', 'limit=x', 'nextToken=abc', 'nextToken=0', 'page=2'])
    await expect(await api(`/secrets?${q}`), 400, /query parameter '(limit|nextToken|page)'/, q)
  const second = await json(await post({ name: `${name}-2`, value: 'v' }))
  const p1 = await json(await api('/secrets?limit=1'))
  assert.equal(p1.body.length, 1)
  assert.equal(p1.body[0].secretID, second.body.secretID, 'newest first')
  const tok = p1.headers.get('x-next-token')
  assert.match(tok ?? '', /^\d+$/)
  const p2 = await json(await api(`/secrets?limit=1&nextToken=${tok}`))
  assert.equal(p2.body[0].secretID, made.body.secretID)
  assert.equal((await api(`/secrets/${name}`, { method: 'DELETE' })).status, 204)
  assert.equal((await api(`/secrets/${second.body.secretID}`, { method: 'DELETE' })).status, 204)
  await expect(await api(`/secrets/${name}`, { method: 'DELETE' }), 404, /not found/, 'deleted twice')
})

/** sandboxd on stateDir, expected to refuse to start: {status, stderr}. */
function refusedStart(stateDir, keyFile) {
  const r = spawnSync(sandboxdBin(), ['--listen', '127.0.0.1:0', '--api-key-file', keyFile, '--state-dir', stateDir],
    { encoding: 'utf8', timeout: 60_000, env: { ...process.env, SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  return { status: r.status, stderr: r.stderr + r.stdout }
}

test('sandboxd refuses to start on an exposed, missing, damaged or foreign secrets.key, naming it', async () => {
  const top = mkdtempSync(join(tmpdir(), 'sbxd-seckey-'))
  const stateDir = join(top, 'state'), keyFile = join(top, 'api-key')
  const apiKey = 'e2b_' + '0'.repeat(40)
  writeFileSync(keyFile, apiKey + '\n', { mode: 0o600 })
  try {
    let srv = await startSandboxd({ stateDir, prefix: 'sbxd-seckey-run-', env: { ...process.env, SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
    const h = { 'X-API-KEY': srv.key, 'Content-Type': 'application/json' }
    const made = await fetch(`${srv.url}/secrets`, { method: 'POST', headers: h, body: JSON.stringify({ name: 'kept', value: 'kept-value' }) })
    assert.equal(made.status, 201)
    await srv.stop()
    const key = join(stateDir, 'secrets.key'), saved = join(top, 'key.saved')
    copyFileSync(key, saved)
    assert.equal(readFileSync(key).length, 32)
    chmodSync(key, 0o644)
    let r = refusedStart(stateDir, keyFile)
    assert.equal(r.status, 1, r.stderr)
    assert.match(r.stderr, new RegExp(`${key}: others may read or write it \\(mode 0644\\): chmod 600 ${key}`))
    unlinkSync(key)
    r = refusedStart(stateDir, keyFile)
    assert.equal(r.status, 1, r.stderr)
    assert.match(r.stderr, /holds 1 secret but .*secrets\.key is missing/)
    writeFileSync(key, Buffer.alloc(31), { mode: 0o600 })
    r = refusedStart(stateDir, keyFile)
    assert.match(r.stderr, /is 31 bytes, not a key/)
    writeFileSync(key, Buffer.alloc(32, 7), { mode: 0o600 })
    r = refusedStart(stateDir, keyFile)
    assert.equal(r.status, 1, r.stderr)
    assert.match(r.stderr, /secrets\.key is not the key of .*secrets\.json/)
    assert.ok(!r.stderr.includes('kept-value'))
    unlinkSync(key)
    copyFileSync(saved, key)
    chmodSync(key, 0o600)
    srv = await startSandboxd({ stateDir, prefix: 'sbxd-seckey-run-', env: { ...process.env, SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
    const back = await fetch(`${srv.url}/secrets/kept`, { headers: h })
    assert.equal(back.status, 200)
    await srv.stop()
  } finally {
    rmSync(top, { recursive: true, force: true })
  }
})
