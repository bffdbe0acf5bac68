// The secret store (issue 18 item 1) through the SDK's Secret class (e2b 2.51; the pinned 2.29.1
// has none: skipped there): create, getInfo by id and by name, update (versions, metadata kept or
// replaced), list in pages, exists, destroy, Secret.fill; errors naming the field; values that are
// in no response, process list, log or state file (a private sandboxd, restarted on its state:
// the secrets persist); scoped secrets (metadata 'sandboxd.sandbox': one sandbox's, gone with it,
// and at the next start after a crash).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync, lstatSync, rmSync } from 'node:fs'
import path from 'node:path'
import {
  T,
  SDK_PACKAGE,
  SDK_VERSION,
  AuthenticationError,
  apiFetch,
  uniq,
  newSandbox,
  killQuietly,
  hostProcessesWith,
  startSandboxd,
  stopSandboxd,
  waitFor,
  Sandbox,
} from './helpers.mjs'

const sdk = await import(SDK_PACKAGE)
const { Secret, SecretError, SecretNotFoundError } = sdk
const skip = Secret ? false : `e2b@${SDK_VERSION} has no Secret class (it came with 2.51)`
const S = { ...T, skip }

/** A value no test prints: long, random, recognisable. */
const secretValue = (tag = 'v') => `sv-${tag}-${uniq('')}${uniq('')}`

async function newSecret(t, name, value, opts = {}) {
  const s = await Secret.create(name, value, opts)
  t.after(() => Secret.destroy(s.secretId, opts).catch(() => {}))
  return s
}

/** Every regular file under dir (not following symlinks) whose bytes hold needle: [path]. */
function filesHolding(dir, needle) {
  const hits = []
  const b = Buffer.from(needle)
  const walk = (d) => {
    let ents
    try { ents = readdirSync(d, { withFileTypes: true }) } catch { return }
    for (const e of ents) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.isFile()) {
        try {
          if (lstatSync(p).size <= 64 << 20 && readFileSync(p).includes(b)) hits.push(p)
        } catch { /* gone or unreadable */ }
      }
    }
  }
  walk(dir)
  return hits
}

/** Processes whose environment holds needle (root reads every one). */
function environsWith(needle) {
  const out = []
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue
    try { if (readFileSync(`/proc/${d}/environ`).includes(Buffer.from(needle))) out.push(Number(d)) } catch { /* gone */ }
  }
  return out
}

test('Secret: create, getInfo by id and name, update (versions), exists, destroy, fill', S, async (t) => {
  const name = uniq('Gh-Token-')
  const value = secretValue('a')
  const before = Date.now()
  const s = await newSecret(t, name, value, { metadata: { team: 'core' } })
  assert.match(s.secretId, /^sec_[a-z0-9]{20}$/)
  assert.equal(s.name, name.toLowerCase(), 'names are lower-cased, as E2B stores them')
  assert.equal(s.version, 1)
  assert.deepEqual(s.metadata, { team: 'core' })
  assert.ok(s.createdAt instanceof Date && s.createdAt.getTime() >= before - 2000)
  assert.equal(s.updatedAt.getTime(), s.createdAt.getTime())
  assert.ok(!JSON.stringify(s).includes(value))
  for (const ref of [s.secretId, name, name.toLowerCase(), name.toUpperCase()]) {
    const got = await Secret.getInfo(ref)
    assert.equal(got.secretId, s.secretId, ref)
    assert.equal(got.version, 1)
  }
  assert.equal(await Secret.exists(name), true)
  assert.equal(await Secret.exists(s.secretId), true)
  const u = await Secret.update(name, secretValue('b'))
  assert.equal(u.version, 2)
  assert.deepEqual(u.metadata, { team: 'core' }, 'metadata kept when not given')
  assert.ok(u.updatedAt.getTime() >= u.createdAt.getTime())
  assert.equal(u.createdAt.getTime(), s.createdAt.getTime())
  const r = await Secret.update(s.secretId, secretValue('c'), { metadata: { team: 'infra', env: 'ci' } })
  assert.equal(r.version, 3)
  assert.deepEqual(r.metadata, { team: 'infra', env: 'ci' }, 'metadata replaced when given')
  assert.equal((await Secret.getInfo(name)).version, 3)
  assert.equal(Secret.fill(name.toLowerCase()), `\${e2b.secrets.${name.toLowerCase()}}`)
  assert.equal(await Secret.destroy(name), true)
  assert.equal(await Secret.destroy(name), false)
  assert.equal(await Secret.exists(name), false)
  await assert.rejects(Secret.getInfo(s.secretId), SecretNotFoundError)
  await assert.rejects(Secret.update(name, 'x'), SecretNotFoundError)
})

test('Secret.list: pages of `limit`, newest first, X-Next-Token until the end', S, async (t) => {
  const prefix = uniq('page-')
  const made = []
  for (let i = 0; i < 5; i++) made.push(await newSecret(t, `${prefix}-${i}`, secretValue(`p${i}`)))
  const pager = Secret.list({ limit: 2 })
  const seen = []
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    assert.ok(items.length <= 2, `a page of ${items.length}`)
    pages++
    for (const it of items) {
      assert.ok(it.secretId && it.name && it.version >= 1 && it.createdAt instanceof Date)
      if (it.name.startsWith(prefix)) seen.push(it.name)
    }
    if (pages > 600) break
  }
  assert.deepEqual(seen, made.map((s) => s.name).reverse(), 'newest first, each once')
  assert.ok(pages >= 3)
  // a token sandboxd did not issue, and a limit out of range, are refused
  const bad = await apiFetch('/secrets?nextToken=abc')
  assert.equal(bad.status, 400)
  await assert.rejects(Secret.list({ limit: 1000 }).nextItems(), (e) => e instanceof SecretError && /'limit'/.test(e.message))
})

test('Secret errors: the field named, the value never in a message', S, async (t) => {
  const value = secretValue('err')
  const cases = [
    ['', /field 'name'/],
    ['sec_reserved', /reserved for secret ids/],
    ['has space', /field 'name'/],
    ['x'.repeat(129), /field 'name'/],
  ]
  for (const [name, re] of cases) {
    await assert.rejects(Secret.create(name, value), (e) => e instanceof SecretError && re.test(e.message) && !e.message.includes(value),
      `name ${JSON.stringify(name)}`)
  }
  const name = uniq('errs-')
  await newSecret(t, name, value)
  await assert.rejects(Secret.create(name.toUpperCase(), value), (e) => e instanceof SecretError && /409: secret '.*' already exists/.test(e.message))
  for (const bad of ['', `${value}\nX-Injected: 1`, `${value}\r`, `${value}\u007f`, 'v'.repeat(65537)]) {
    await assert.rejects(Secret.create(uniq('bad-'), bad), (e) => e instanceof SecretError && /field 'value'/.test(e.message) && !e.message.includes(value))
    await assert.rejects(Secret.update(name, bad), (e) => e instanceof SecretError && /field 'value'/.test(e.message) && !e.message.includes(value))
  }
  // a NUL never reaches the store: the body is refused by its position alone
  await assert.rejects(Secret.create(uniq('nul-'), `${value}\u0000`), (e) => /400: malformed JSON body at line 1, column \d+: .*\\u0000/.test(e.message) && !e.message.includes(value))
  const big = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v']))
  await assert.rejects(Secret.create(uniq('md-'), value, { metadata: big }), (e) => /field 'metadata': at most 32 entries/.test(e.message))
  await assert.rejects(Secret.create(uniq('md-'), value, { metadata: { k: 'v'.repeat(1025) } }), (e) => /field 'metadata\.k'/.test(e.message))
  await assert.rejects(Secret.create(uniq('md-'), value, { metadata: { 'sandboxd.sandbox': 'inosuchsandbox00000000' } }),
    (e) => /field 'metadata\.sandboxd\.sandbox': sandbox 'inosuchsandbox00000000' not found/.test(e.message))
  // a wrong key: the SDK's AuthenticationError, and nothing made
  await assert.rejects(Secret.create(uniq('k-'), value, { apiKey: 'e2b_' + 'f'.repeat(40) }), AuthenticationError)
  assert.equal(Secret.fill('ok-name'), '${e2b.secrets.ok-name}')
  assert.throws(() => Secret.fill('a}b'))
})

test('values are in no response, process, environment, log or state file; secrets persist across a restart', S, async (t) => {
  const srv = await startSandboxd({ env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  t.after(async () => { await stopSandboxd(srv); rmSync(srv.stateDir, { recursive: true, force: true }) })
  const o = srv.opts
  const values = [secretValue('one'), secretValue('two'), secretValue('three')]
  const name = uniq('leak-')
  const bodies = []
  const raw = async (p, init = {}) => {
    const res = await fetch(srv.url + p, { ...init, headers: { 'X-API-KEY': srv.key, 'Content-Type': 'application/json', ...(init.headers ?? {}) } })
    bodies.push(`${res.status} ${JSON.stringify([...res.headers])} ${await res.text()}`)
    return res
  }
  const s = await Secret.create(name, values[0], { ...o, metadata: { purpose: 'leak test' } })
  await Secret.update(name, values[1], o)
  const infos = [s, await Secret.getInfo(name, o), await Secret.list(o).nextItems(), await Secret.exists(name, o)]
  // the same operations on the wire, and refusals whose bodies held the value
  await raw('/secrets', { method: 'POST', body: JSON.stringify({ name: `${name}-w`, value: values[2] }) })
  await raw(`/secrets/${name}-w`, { method: 'POST', body: JSON.stringify({ value: values[2] }) })
  await raw(`/secrets/${name}-w`)
  await raw('/secrets')
  await raw('/secrets', { method: 'POST', body: `{"name":"${name}-x","value":"${values[2]}` })             // not JSON
  await raw('/secrets', { method: 'POST', body: JSON.stringify({ name: `${name}-w`, value: values[2] }) })   // taken
  await raw('/secrets', { method: 'POST', body: JSON.stringify({ name: 'sec_x', value: values[2] }) })       // bad name
  await raw('/secrets', { method: 'POST', body: JSON.stringify({ name: `${name}-y`, value: `${values[2]}\n` }) })
  await raw('/secrets', { method: 'POST', body: JSON.stringify({ name: `${name}-z`, value: values[2], extra: values[2] }) })
  await raw(`/secrets/${name}-w`, { method: 'POST', body: JSON.stringify({ value: values[2], metadata: { 'sandboxd.sandbox': 'ix' } }) })
  await raw(`/secrets/${name}-w`, { method: 'POST', body: `{"value":"${values[2]}","value":"${values[2]}"}` })   // repeated field
  assert.equal(bodies.filter((b) => b.startsWith('4')).length, 7, bodies.join('\n'))
  for (const v of values) {
    for (const b of [...bodies, JSON.stringify(infos)]) assert.ok(!b.includes(v), `a response carries a value: ${b}`)
    assert.deepEqual(hostProcessesWith(v), [], 'a command line carries a value')
    assert.deepEqual(environsWith(v), [], 'an environment carries a value')
  }
  // restart on the same state: the secrets are there, the files hold none of the values
  await stopSandboxd(srv)
  for (const v of values) {
    assert.ok(!srv.log().includes(v), 'sandboxd\'s log carries a value')
    assert.deepEqual(filesHolding(srv.stateDir, v), [], 'a state file carries a value')
  }
  const again = await startSandboxd({ stateDir: srv.stateDir, port: srv.port, env: { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' } })
  t.after(() => stopSandboxd(again))
  const back = await Secret.getInfo(name, again.opts)
  assert.equal(back.secretId, s.secretId)
  assert.equal(back.version, 2)
  assert.deepEqual(back.metadata, { purpose: 'leak test' })
  assert.equal(await Secret.exists(`${name}-w`, again.opts), true)
  await stopSandboxd(again)
  for (const v of values) assert.ok(!again.log().includes(v))
})

test('scoped secrets: one sandbox\'s, listed, fixed scope, deleted when it ends', S, async (t) => {
  const sbx = await newSandbox(t)
  const name = uniq('host-token-')
  const s = await newSecret(t, name, secretValue('scoped'), { metadata: { 'sandboxd.sandbox': sbx.sandboxId, why: 'gh' } })
  assert.deepEqual(s.metadata, { 'sandboxd.sandbox': sbx.sandboxId, why: 'gh' })
  const pager = Secret.list()
  let listed = false
  while (pager.hasNext) listed ||= (await pager.nextItems()).some((x) => x.secretId === s.secretId)
  assert.ok(listed, 'listed like any other')
  await assert.rejects(Secret.update(name, 'v2', { metadata: { why: 'gh' } }), (e) => /field 'metadata\.sandboxd\.sandbox'/.test(e.message))
  assert.equal((await Secret.update(name, 'v2', { metadata: { 'sandboxd.sandbox': sbx.sandboxId } })).version, 2)
  await killQuietly(sbx)
  await waitFor(async () => !(await Secret.exists(name)), { what: 'the scoped secret to go with its sandbox' })
})

test('scoped secrets of a sandboxd that crashed go at its next start', S, async (t) => {
  const env = { SANDBOXD_WARM_POOL: '0', SANDBOXD_NET_POOL: '0' }
  const srv = await startSandboxd({ env })
  t.after(async () => { await stopSandboxd(srv); rmSync(srv.stateDir, { recursive: true, force: true }) })
  const sbx = await Sandbox.create('base', { ...srv.opts, allowInternetAccess: false, timeoutMs: 120_000 })
  const name = uniq('orphan-')
  await Secret.create(name, secretValue('orphan'), { ...srv.opts, metadata: { 'sandboxd.sandbox': sbx.sandboxId } })
  await Secret.create(`${name}-kept`, secretValue('kept'), srv.opts)
  srv.proc.kill('SIGKILL')
  await srv.exited
  const again = await startSandboxd({ stateDir: srv.stateDir, env })
  t.after(() => stopSandboxd(again))
  assert.equal(await Secret.exists(name, again.opts), false)
  assert.equal(await Secret.exists(`${name}-kept`, again.opts), true)
  assert.match(again.log(), /deleted 1 secret scoped to sandboxes that no longer exist/)
})
