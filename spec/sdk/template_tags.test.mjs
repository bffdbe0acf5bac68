// Template tags (issue 20): E2B's tags as the SDK uses them — Template.build(t, 'name:tag') and
// { tags }, Template.assignTags ('name:tag' → POST /templates/tags), Template.removeTags (DELETE
// /templates/tags), Template.getTags (GET /templates/{id}/tags). A template has builds, each tag
// names one, a build without tags gets 'default', Sandbox.create('name') is 'name:default' and
// Sandbox.create('name:tag') starts from that tag's build (its files and its envs). A build no tag
// names any more leaves, and its layer goes once no sandbox or cache entry holds it; tags survive a
// restart; malformed tags and unknown fields are refused. Both SDKs (2.29.1 has the tag calls too).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import {
  Sandbox, SDK_PACKAGE, SDK_VERSION, apiFetch, killQuietly, newSandbox, uniq, sharedStateDir, startSandboxd, stopSandboxd, waitFor,
} from './helpers.mjs'

const { Template } = await import(SDK_PACKAGE)
const skip = typeof Template !== 'function' ? `${SDK_PACKAGE} has no Template builder`
  : typeof Template.assignTags !== 'function' || typeof Template.getTags !== 'function' || typeof Template.removeTags !== 'function'
    ? `${SDK_PACKAGE} ${SDK_VERSION} has no Template.assignTags/removeTags/getTags` : false
const TB = { timeout: 300_000, skip }

const deleteQuietly = (ref, base = '', key) =>
  fetch(`${base || process.env.E2B_API_URL}/templates/${encodeURIComponent(ref)}`, {
    method: 'DELETE', headers: { 'X-API-KEY': key || process.env.E2B_API_KEY },
  }).catch(() => {})
const send = (method, p, body) =>
  apiFetch(p, { method, body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } })
const which = (n) => Template().fromTemplate('base').runCmd(`echo ${n} > /home/user/which`).setEnvs({ MB_WHICH: `env-${n}` })
const seen = async (ref, opts = {}) => {
  const sbx = await Sandbox.create(ref, { timeoutMs: 60_000, ...opts })
  try {
    return (await sbx.commands.run('cat /home/user/which; echo "$MB_WHICH"')).stdout
  } finally {
    await killQuietly(sbx)
  }
}
const byTag = (tags) => Object.fromEntries(tags.map((t) => [t.tag, t.buildId]))

test('builds tagged v1, v2 and default: each tag starts its own build; assignTags moves a tag, removeTags drops one, getTags lists them', TB, async (t) => {
  const name = uniq('tt')
  t.after(() => deleteQuietly(name))
  const v1 = await Template.build(which('one'), `${name}:v1`)
  const v2 = await Template.build(which('two'), name, { tags: ['v2', 'Stable'] })
  const d = await Template.build(which('zero'), name)
  assert.equal(v2.templateId, v1.templateId, 'one template, three builds')
  assert.equal(d.templateId, v1.templateId)
  assert.equal(new Set([v1.buildId, v2.buildId, d.buildId]).size, 3)

  assert.equal(await seen(`${name}:v1`), 'one\nenv-one\n', 'name:v1: the v1 build\'s files and envs')
  assert.equal(await seen(`${name}:v2`), 'two\nenv-two\n')
  assert.equal(await seen(`${name}:stable`), 'two\nenv-two\n', 'tags are lower-cased, as E2B does')
  assert.equal(await seen(name), 'zero\nenv-zero\n', 'name alone is name:default')
  assert.equal(await seen(`${name}:default`), 'zero\nenv-zero\n')
  assert.equal(await seen(`${v1.templateId}:v1`), 'one\nenv-one\n', 'the template id takes a tag too')

  const tags = await Template.getTags(name)
  assert.deepEqual(byTag(tags), { v1: v1.buildId, v2: v2.buildId, stable: v2.buildId, default: d.buildId })
  for (const x of tags) assert.ok(x.createdAt instanceof Date && !Number.isNaN(x.createdAt.getTime()), `${x.tag}: createdAt ${x.createdAt}`)
  assert.deepEqual(byTag(await Template.getTags(v1.templateId)), byTag(tags), 'by id as by name')

  // listed once; Template.exists finds it
  const list = await (await apiFetch('/templates')).json()
  const mine = list.filter((x) => x.templateID === v1.templateId)
  assert.equal(mine.length, 1, JSON.stringify(mine))
  assert.deepEqual(mine[0].names, [name])
  assert.equal(mine[0].buildID, d.buildId, 'buildID: the newest build')
  assert.equal(mine[0].buildCount, 3)
  assert.equal(await (Template.exists ?? Template.aliasExists).call(Template, name), true)

  // assignTags: v1 moves to v2's build; the target without a tag is its default build
  const moved = await Template.assignTags(`${name}:v2`, 'v1')
  assert.equal(moved.buildId, v2.buildId)
  assert.deepEqual(moved.tags, ['v1'])
  assert.equal(await seen(`${name}:v1`), 'two\nenv-two\n', 'v1 now starts the v2 build')
  const prod = await Template.assignTags(name, ['prod', 'live'])
  assert.equal(prod.buildId, d.buildId)
  assert.deepEqual(byTag(await Template.getTags(name)),
    { v1: v2.buildId, v2: v2.buildId, stable: v2.buildId, default: d.buildId, prod: d.buildId, live: d.buildId },
    'the v1 build, left without a tag, is gone')
  assert.equal((await (await apiFetch('/templates')).json()).find((x) => x.templateID === v1.templateId).buildCount, 2)

  // removeTags
  await Template.removeTags(name, 'stable')
  await Template.removeTags(name, ['prod', 'live'])
  assert.deepEqual(byTag(await Template.getTags(name)), { v1: v2.buildId, v2: v2.buildId, default: d.buildId })
  await assert.rejects(Sandbox.create(`${name}:stable`, { timeoutMs: 30_000 }), (e) => /404: template '[^']+' has no tag 'stable'/.test(e.message), 'a removed tag is unknown')
  await assert.rejects(Template.removeTags(name, 'default'), (e) => /'default' cannot be removed/.test(e.message), 'default stays, as in E2B')
  await assert.rejects(Template.removeTags(name, 'nope'), (e) => /no tag 'nope'/.test(e.message))
  await assert.rejects(Template.removeTags(`${name}:v1`, 'v2'), (e) => /names a tag/.test(e.message))
  await assert.rejects(Template.assignTags(`${name}:nope`, 'x'), (e) => /no tag 'nope'/.test(e.message))
  await assert.rejects(Template.assignTags(`${name}-missing:v1`, 'x'), (e) => new RegExp(`template '${name}-missing' not found`).test(e.message))
  await assert.rejects(Template.getTags(`${name}-missing`), (e) => new RegExp(`template '${name}-missing' not found`).test(e.message))

  // a build on a tag of another template
  const child = uniq('ttc')
  t.after(() => deleteQuietly(child))
  await Template.build(Template().fromTemplate(`${name}:v2`).runCmd('cat /home/user/which > /home/user/from'), child)
  const c = await Sandbox.create(child, { timeoutMs: 60_000 })
  t.after(() => killQuietly(c))
  assert.equal((await c.commands.run('cat /home/user/from; echo "$MB_WHICH"')).stdout, 'two\nenv-two\n', 'fromTemplate(name:tag): that build and its envs')
  await c.kill()

  // deleting the template: refused while a sandbox of any of its builds runs, then every build goes
  const user = await Sandbox.create(`${name}:v2`, { timeoutMs: 60_000 })
  t.after(() => killQuietly(user))
  const inUse = await apiFetch(`/templates/${name}`, { method: 'DELETE' })
  assert.equal(inUse.status, 409)
  assert.match((await inUse.json()).message, new RegExp(`^template '${name}' is used by 1 sandbox`))
  await user.kill()
  assert.equal((await apiFetch(`/templates/${name}:v1`, { method: 'DELETE' })).status, 400, 'a template is deleted whole, not by tag')
  assert.equal((await apiFetch(`/templates/${name}`, { method: 'DELETE' })).status, 204)
  await assert.rejects(Template.getTags(v1.templateId), (e) => /not found/.test(e.message))
  assert.equal(await (Template.exists ?? Template.aliasExists).call(Template, name), false)
})

test('a build tagged without default leaves Sandbox.create(name) unknown; a moved tag frees its old build\'s layer once no sandbox holds it', { ...TB, skip: skip || (!sharedStateDir() && 'no MB_SANDBOXD_PID: the state dir is unknown') }, async (t) => {
  const stateDir = sharedStateDir()
  const name = uniq('ttl')
  t.after(() => deleteQuietly(name))
  const steps = () => Template().fromTemplate('base').runCmd('head -c 48 /dev/urandom | base64 > /home/user/rnd')
  const a = await Template.build(steps(), name, { tags: ['a'] })
  // the same steps forced: the cache entry now holds b's layer, a's is held by its tag alone
  const b = await Template.build(steps(), name, { tags: ['b'], skipCache: true })
  await assert.rejects(Sandbox.create(name, { timeoutMs: 30_000 }), (e) => /404: template '[^']+' has no tag 'default'/.test(e.message),
    'no build got default')
  const layerOf = (buildId) => {
    const cat = JSON.parse(readFileSync(path.join(stateDir, 'snapshots.json'), 'utf8'))
    const entry = cat.snapshots.find((s) => s.id === a.templateId)
    return entry?.builds?.find((x) => x.id === buildId)?.layer
  }
  const la = layerOf(a.buildId)
  const lb = layerOf(b.buildId)
  assert.ok(la && lb && la !== lb, `two builds, two layers: ${la} ${lb}`)
  const layerDir = (l) => path.join(stateDir, 'layers', l)
  assert.ok(existsSync(layerDir(la)))

  const holder = await Sandbox.create(`${name}:a`, { timeoutMs: 60_000 })
  t.after(() => killQuietly(holder))
  const rndA = (await holder.commands.run('cat /home/user/rnd')).stdout
  await Template.assignTags(`${name}:b`, 'a')
  assert.equal(layerOf(a.buildId), undefined, 'the build no tag names left the catalogue')
  assert.ok(existsSync(layerDir(la)), 'its layer stays while a sandbox uses it')
  assert.equal((await holder.commands.run('cat /home/user/rnd')).stdout, rndA, 'and the sandbox keeps its files')
  await holder.kill()
  await waitFor(() => !existsSync(layerDir(la)), { timeoutMs: 20_000, what: `layer ${la} to be removed` })
  assert.ok(existsSync(layerDir(lb)), 'the build the tags name keeps its layer')
  assert.notEqual(await seenRnd(`${name}:a`), rndA, 'name:a is the other build now')
  await assert.rejects(Template.removeTags(name, ['a', 'b']), (e) => /all the tags/.test(e.message), 'the last tags cannot go: delete the template')
})

async function seenRnd(ref) {
  const sbx = await Sandbox.create(ref, { timeoutMs: 60_000 })
  try {
    return (await sbx.commands.run('cat /home/user/rnd')).stdout
  } finally {
    await killQuietly(sbx)
  }
}

test('tags survive a restart, each with its build, its envs and when it was assigned', { ...TB, timeout: 400_000 }, async (t) => {
  let s = await startSandboxd()
  t.after(() => stopSandboxd(s))
  const name = 'kept'
  await Template.build(which('one'), `${name}:v1`, s.opts)
  await Template.build(which('two'), name, { ...s.opts, tags: ['v2', 'default'] })
  const before = await Template.getTags(name, s.opts)
  assert.equal(before.length, 3)
  await stopSandboxd(s)
  s = await startSandboxd({ stateDir: s.stateDir })
  const after = await Template.getTags(name, s.opts)
  assert.deepEqual(after.map((x) => [x.tag, x.buildId, x.createdAt.getTime()]), before.map((x) => [x.tag, x.buildId, x.createdAt.getTime()]))
  assert.equal(await seen(`${name}:v1`, s.opts), 'one\nenv-one\n')
  assert.equal(await seen(`${name}:v2`, s.opts), 'two\nenv-two\n')
  assert.equal(await seen(name, s.opts), 'two\nenv-two\n')
  await Template.assignTags(`${name}:v1`, 'default', s.opts)
  await stopSandboxd(s)
  s = await startSandboxd({ stateDir: s.stateDir })
  assert.equal(await seen(name, s.opts), 'one\nenv-one\n', 'a moved tag stays moved')
  assert.equal(await seen(`${name}:v2`, s.opts), 'two\nenv-two\n')
})

test('malformed tags, unknown fields and tagged snapshots are refused, naming what is wrong', { timeout: 120_000 }, async (t) => {
  const name = uniq('ttb')
  const expect = async (res, status, re) => {
    const text = await res.text()
    assert.equal(res.status, status, text)
    assert.match(JSON.parse(text).message, re)
  }
  await expect(await send('POST', '/v3/templates', { name: `${name}:Bad Tag` }), 400, /field 'name': tag 'Bad Tag'/)
  await expect(await send('POST', '/v3/templates', { name: `${name}:` }), 400, /names no tag/)
  await expect(await send('POST', '/v3/templates', { name, tags: ['ok', 'a/b'] }), 400, /field 'tags\[1\]': tag 'a\/b'/)
  await expect(await send('POST', '/v3/templates', { name, tags: 'v1' }), 400, /field 'tags' must be an array/)
  await expect(await send('POST', '/v3/templates', { name, tags: ['123e4567-e89b-12d3-a456-426614174000'] }), 400, /cannot be a UUID/)
  await expect(await send('POST', '/v3/templates', { name, tags: ['x'.repeat(129)] }), 400, /1 to 128 characters/)
  await expect(await send('POST', '/v3/templates', { name, tags: Array.from({ length: 17 }, (_, i) => `t${i}`) }), 400, /at most 16 tags/)
  await expect(await send('POST', '/templates/tags', { target: `${name}:v1`, tags: ['a'], extra: 1 }), 400, /field 'extra'/)
  await expect(await send('POST', '/templates/tags', { target: `${name}:v1` }), 400, /field 'tags' is required/)
  await expect(await send('POST', '/templates/tags', { target: `${name}:v1`, tags: [] }), 400, /field 'tags' must be an array of 1 or more/)
  await expect(await send('POST', '/templates/tags', { tags: ['a'] }), 400, /field 'target' is required/)
  await expect(await send('POST', '/templates/tags', { target: `${name}:v1`, tags: ['a'] }), 404, new RegExp(`template '${name}' not found`))
  await expect(await send('DELETE', '/templates/tags', { name, tags: ['a'], target: 'x' }), 400, /field 'target'/)
  await expect(await send('DELETE', '/templates/tags', { name, tags: ['default'] }), 400, /'default' cannot be removed/)
  await expect(await send('DELETE', '/templates/tags', { name, tags: ['a'] }), 404, new RegExp(`template '${name}' not found`))
  await expect(await apiFetch(`/templates/${name}/tags`), 404, new RegExp(`template '${name}' not found`))
  await expect(await apiFetch('/templates/base/tags'), 400, /'base'/)
  // a snapshot is one build: a tag other than default in its name is refused
  const sbx = await newSandbox(t)
  await expect(await send('POST', `/sandboxes/${sbx.sandboxId}/snapshots`, { name: `${name}:v1` }), 400, /tag 'v1': a snapshot is one build/)
})
