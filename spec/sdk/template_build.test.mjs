// Template builds (issue 20): E2B's own `Template` builder against sandboxd — POST /v3/templates,
// the COPY upload handshake (GET /templates/{id}/files/{hash}, PUT to the URL it names), POST
// /v2/templates/{id}/builds/{id}, GET .../status polled for logs — then Sandbox.create(name) from
// the result: the RUN steps' effects, the copied files (content, mode, owner), the envs and the
// workdir. A failing step fails the build naming the step with its output; unknown fields ⇒ 400.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, writeFileSync, chmodSync, rmSync, readFileSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Sandbox, SDK_PACKAGE, apiFetch, killQuietly, uniq, sharedStateDir, startSandboxd, stopSandboxd } from './helpers.mjs'

const { Template } = await import(SDK_PACKAGE)
const skip = typeof Template !== 'function' ? `${SDK_PACKAGE} has no Template builder` : false
const TB = { timeout: 180_000, skip }

const deleteQuietly = (ref) => apiFetch(`/templates/${encodeURIComponent(ref)}`, { method: 'DELETE' }).catch(() => {})
const json = (body) => ({ method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } })

/** A build context: hello.txt, a directory tree with an executable. */
function context(t) {
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-tpl-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'hello.txt'), 'hello from the build context\n')
  mkdirSync(path.join(dir, 'tree', 'sub'), { recursive: true })
  writeFileSync(path.join(dir, 'tree', 'run.sh'), '#!/bin/sh\necho tree-run\n')
  chmodSync(path.join(dir, 'tree', 'run.sh'), 0o755)
  writeFileSync(path.join(dir, 'tree', 'sub', 'data.txt'), 'nested\n')
  return dir
}

test('Template.build: RUN, COPY, ENV, WORKDIR make a template Sandbox.create starts from', TB, async (t) => {
  const dir = context(t)
  const name = uniq('tb')
  t.after(() => deleteQuietly(name))
  const tpl = Template({ fileContextPath: dir })
    .fromTemplate('base')
    .runCmd('id -un > /tmp/who && echo step-one-output')
    .runCmd('mkdir -p /opt/tool && echo root-made > /opt/tool/made', { user: 'root' })
    .copy('hello.txt', '/home/user/hello.txt', { mode: 0o640 })
    .copy('tree', '/opt/tree/', { user: 'root' })
    .setEnvs({ MB_TEMPLATE_ENV: 'from-the-template', MB_SECOND: 'two' })
    .setWorkdir('/home/user/work')
    .runCmd('pwd > /tmp/pwd && echo "$MB_TEMPLATE_ENV" > /tmp/env')
  const logs = []
  const info = await Template.build(tpl, name, { onBuildLogs: (l) => logs.push(l) })
  assert.equal(info.name ?? info.alias, name)
  assert.match(info.templateId, /^[a-z0-9]+$/)
  const text = logs.map((l) => l.message).join('\n')
  assert.match(text, /step-one-output/, 'a RUN step\'s output reaches onBuildLogs')
  assert.match(text, /\[7\/7\] RUN pwd/, 'each step is announced')

  // listed as a template, found by name
  const list = await (await apiFetch('/templates')).json()
  const mine = list.find((x) => x.names.includes(name))
  assert.ok(mine, JSON.stringify(list))
  assert.equal(mine.templateID, info.templateId)
  assert.equal(await (Template.exists ?? Template.aliasExists).call(Template, name), true)

  const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
  t.after(() => killQuietly(sbx))
  const run = async (cmd, opts) => (await sbx.commands.run(cmd, opts)).stdout
  assert.equal(await run('cat /tmp/who'), 'user\n', 'RUN runs as user by default')
  assert.equal(await run('cat /opt/tool/made; stat -c %U /opt/tool/made'), 'root-made\nroot\n', 'RUN with user root')
  assert.equal(await run('cat /home/user/hello.txt'), 'hello from the build context\n')
  assert.equal(await run('stat -c "%a %U" /home/user/hello.txt'), '640 user\n', 'COPY mode, owned by the current user')
  assert.equal(await run('cat /opt/tree/sub/data.txt; /opt/tree/run.sh; stat -c "%a %U" /opt/tree/run.sh'), 'nested\ntree-run\n755 root\n',
    'a directory\'s contents copied with their modes, owned by the step\'s user')
  assert.equal(await run('cat /tmp/pwd /tmp/env'), '/home/user/work\nfrom-the-template\n', 'WORKDIR and ENV apply to later steps')
  assert.equal(await run('echo "$MB_TEMPLATE_ENV $MB_SECOND"; pwd'), 'from-the-template two\n/home/user/work\n',
    'the template\'s envs and workdir apply to its sandboxes')
  assert.equal(await run('pwd', { cwd: '/tmp' }), '/tmp\n', 'a command naming its cwd keeps it')
  const over = await Sandbox.create(name, { timeoutMs: 60_000, envs: { MB_SECOND: 'overridden' } })
  t.after(() => killQuietly(over))
  assert.equal((await over.commands.run('echo $MB_TEMPLATE_ENV $MB_SECOND')).stdout, 'from-the-template overridden\n',
    'create envs win over the template\'s')

  // a template built on it starts from its files and envs; building the name again keeps its id
  const child = uniq('tbc')
  t.after(() => deleteQuietly(child))
  await Template.build(Template().fromTemplate(name).runCmd('cat /home/user/hello.txt > child.txt && echo "$MB_SECOND" >> child.txt'), child)
  const c = await Sandbox.create(child, { timeoutMs: 60_000 })
  t.after(() => killQuietly(c))
  assert.equal((await c.commands.run('cat /home/user/work/child.txt')).stdout, 'hello from the build context\ntwo\n')
  const again = await Template.build(Template().fromTemplate('base').runCmd('true'), name)
  assert.equal(again.templateId, info.templateId, 'a template built again keeps its id')
  // the running sandbox keeps its files; the rebuilt template has none of them
  assert.equal(await run('cat /tmp/who'), 'user\n')
  const fresh = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(fresh))
  assert.equal((await fresh.commands.run('test -e /tmp/who && echo yes || echo no')).stdout, 'no\n')

  // deleting it while sandboxes use it is refused, naming it and how many; once they are gone it goes
  const inUse = await apiFetch(`/templates/${info.templateId}`, { method: 'DELETE' })
  assert.equal(inUse.status, 409)
  assert.match((await inUse.json()).message, new RegExp(`^template '${name}' is used by 3 sandboxes: kill them first`))
  assert.equal((await fresh.commands.run('echo alive')).stdout, 'alive\n')
  await assert.rejects(Sandbox.deleteSnapshot(name), (e) => /^409: /.test(e.message), 'the SDK reports the 409')
  for (const s of [sbx, over, fresh]) await s.kill()
  assert.equal((await apiFetch(`/templates/${info.templateId}`, { method: 'DELETE' })).status, 204)
  assert.equal(await (Template.exists ?? Template.aliasExists).call(Template, name), false)
})

test('a failing RUN fails the build, naming the step and its output', TB, async (t) => {
  const name = uniq('tbf')
  t.after(() => deleteQuietly(name))
  const tpl = Template().fromTemplate('base').runCmd('echo fine').runCmd('echo about-to-fail; echo on-stderr >&2; exit 3').runCmd('echo never')
  const logs = []
  const err = await Template.build(tpl, name, { onBuildLogs: (l) => logs.push(l.message) }).then(() => null, (e) => e)
  assert.ok(err, 'the build fails')
  assert.equal(err.name, 'BuildError', String(err))
  assert.match(err.message, /RUN echo about-to-fail.*exit status 3/s, err.message)
  assert.match(err.message, /on-stderr/, 'the step\'s output is in the error')
  assert.ok(!logs.some((m) => /never/.test(m) && !/RUN/.test(m)), 'later steps do not run')
  assert.equal(await (Template.exists ?? Template.aliasExists).call(Template, name), false, 'nothing is recorded')
})

test('setStartCmd: the start command runs in every sandbox of the template, ready before create returns', TB, async (t) => {
  const name = uniq('tbr')
  t.after(() => deleteQuietly(name))
  const tpl = Template().fromTemplate('base')
    .setStartCmd('hostname > /tmp/started && exec sleep 100000', 'grep -qx "$(hostname)" /tmp/started')
  await Template.build(tpl, name)
  const sbx = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(sbx))
  assert.equal((await sbx.commands.run('cat /tmp/started')).stdout.trim(), sbx.sandboxId, 'its start command ran in this sandbox')
  assert.match((await sbx.commands.run('ps -eo args')).stdout, /^sleep 100000$/m, 'and goes on running')
  // a start command that ends before its ready command succeeds fails the build
  const bad = uniq('tbr')
  t.after(() => deleteQuietly(bad))
  const err = await Template.build(Template().fromTemplate('base').setStartCmd('echo giving-up; exit 4', 'false'), bad).then(() => null, (e) => e)
  assert.ok(err, 'the build fails')
  assert.match(err.message, /start command ended \(exit status 4\).*giving-up/s, err.message)
})

test('template build requests are strict: unknown fields, bad steps, foreign images, uploads without their token', TB, async () => {
  const name = uniq('tbs')
  let res = await apiFetch('/v3/templates', json({ name, bogus: 1 }))
  assert.equal(res.status, 400)
  assert.match((await res.json()).message, /'bogus'/)
  assert.equal((await apiFetch('/v3/templates', json({ name, tags: ['not a tag'] }))).status, 400, 'a malformed tag (template_tags.test.mjs has the rest)')
  assert.equal((await apiFetch('/v3/templates', json({ name, cpuCount: 100000 }))).status, 400, 'more CPUs than sandboxd gives')
  assert.equal((await apiFetch('/v3/templates', json({ name, minFreeDiskMb: 10 }))).status, 400)
  res = await apiFetch('/v3/templates', json({ name }))
  assert.equal(res.status, 202)
  const { templateID, buildID, names } = await res.json()
  assert.deepEqual(names, [name])
  try {
    const start = (body) => apiFetch(`/v2/templates/${templateID}/builds/${buildID}`, json(body))
    const refusals = [
      [{ fromTemplate: 'base', steps: [], extra: true }, /'extra'/],
      [{ fromTemplate: 'base', steps: [{ type: 'RUN', args: ['true'], color: 'red' }] }, /steps\[0\]\.field 'color'/],
      [{ fromTemplate: 'base', steps: [{ type: 'HEALTHCHECK', args: [] }] }, /steps\[0\]\.type 'HEALTHCHECK'/],
      [{ fromTemplate: 'base', steps: [{ type: 'RUN', args: ['true', 'nobody'] }] }, /user 'nobody'/],
      [{ fromTemplate: 'base', steps: [{ type: 'COPY', args: ['a', '/a'], filesHash: 'f'.repeat(64) }] }, /not uploaded/],
      [{ fromImage: 'Ubuntu:22.04', steps: [] }, /fromImage.*not an image reference/],
      [{ fromTemplate: 'base', fromImage: 'e2bdev/base', steps: [] }, /exactly one/],
      [{ steps: Array.from({ length: 257 }, () => ({ type: 'RUN', args: ['true'] })), fromTemplate: 'base' }, /at most 256/],
    ]
    for (const [body, re] of refusals) {
      const r = await start(body)
      const b = await r.json()
      assert.equal(r.status, 400, JSON.stringify(b))
      assert.match(b.message, re)
    }
    // the upload handshake: a link, then a PUT that needs its token (not the API key)
    const hash = 'a'.repeat(64)
    const link = await (await apiFetch(`/templates/${templateID}/files/${hash}`)).json()
    assert.equal(link.present, false)
    const url = new URL(link.url)
    assert.equal(url.pathname, `/templates/${templateID}/files/${hash}`)
    assert.match(url.searchParams.get('token'), /^[a-z0-9]{40}$/)
    const bare = new URL(url)
    bare.search = ''
    assert.equal((await fetch(bare, { method: 'PUT', body: 'x' })).status, 401, 'no token')
    assert.equal((await apiFetch(bare.pathname, { method: 'PUT', body: 'x' })).status, 401, 'the API key is no upload token')
    assert.equal((await fetch(`${bare}?token=${'0'.repeat(40)}`, { method: 'PUT', body: 'x' })).status, 401, 'another token')
    assert.equal((await fetch(url, { method: 'PUT', body: 'not a tar' })).status, 200)
    assert.equal((await fetch(url, { method: 'PUT', body: 'again' })).status, 401, 'a token serves once')
    assert.deepEqual(await (await apiFetch(`/templates/${templateID}/files/${hash}`)).json(), { present: true })
    assert.equal((await apiFetch(`/templates/${templateID}/files/nothex`)).status, 400)
    assert.equal((await apiFetch(`/templates/nosuchtemplate/files/${hash}`)).status, 404)
    // a COPY of an upload that is no tar fails in the build, at its step
    assert.equal((await start({ fromImage: 'e2bdev/base', steps: [{ type: 'COPY', args: ['x', '/x'], filesHash: hash }] })).status, 202)
    assert.equal((await start({ fromTemplate: 'base' })).status, 409, 'a build starts once')
    let st
    for (let i = 0; i < 600; i++) {
      st = await (await apiFetch(`/templates/${templateID}/builds/${buildID}/status?logsOffset=0`)).json()
      if (st.status !== 'building') break
      await new Promise((r) => setTimeout(r, 100))
    }
    assert.equal(st.status, 'error', JSON.stringify(st))
    assert.equal(st.reason.step, '1')
    assert.match(st.reason.message, /COPY x \/x failed/)
    assert.ok(st.reason.logEntries.length > 0)
    for (const e of st.logEntries) assert.ok(!Number.isNaN(Date.parse(e.timestamp)) && e.level && typeof e.message === 'string')
    const tail = await (await apiFetch(`/templates/${templateID}/builds/${buildID}/status?logsOffset=${st.logEntries.length}`)).json()
    assert.deepEqual(tail.logEntries, [], 'logsOffset skips what was read')
    assert.equal((await apiFetch(`/templates/${templateID}/builds/${buildID}/status?limit=1`)).status, 400)
    assert.equal((await apiFetch(`/templates/${templateID}/builds/nosuchbuild/status`)).status, 404)
  } finally {
    await deleteQuietly(name)
  }
})

// ---- the build cache (issue 20, item 3): each step a layer, the longest cached prefix reused ----

/** A RUN step that writes 16 random bytes (hex) to /home/user/<file>: a rerun changes it. */
const rnd = (file, extra = '') => `od -An -tx1 -N16 /dev/urandom | tr -d ' \\n' > /home/user/${file}${extra}`
const read = (sbx, files) => Promise.all(files.map(async (f) => (await sbx.commands.run(`cat /home/user/${f}`)).stdout.trim()))
const build = async (tpl, name, opts = {}) => {
  const logs = []
  await Template.build(tpl, name, { ...opts, onBuildLogs: (l) => logs.push(l.message) })
  return logs.join('\n')
}
const cached = (logs) => [...logs.matchAll(/CACHED \[(\d+)\/\d+\]/g)].map((m) => Number(m[1]))

/** The layer ids of template `id` (its top layer and every one below it) in stateDir. */
function templateLayers(stateDir, id) {
  const cat = JSON.parse(readFileSync(path.join(stateDir, 'snapshots.json'), 'utf8'))
  const snap = cat.snapshots.find((s) => s.id === id)
  assert.ok(snap, `template ${id} is in the catalogue`)
  const out = []
  for (let l = snap.layer; l; l = readFileSync(path.join(stateDir, 'layers', l, 'parent'), 'utf8').trim()) out.push(l)
  return out
}

test('rebuilding after editing the last step reuses the earlier steps\' layers; skipCache() and a step\'s force run again', TB, async (t) => {
  const name = uniq('tbk')
  t.after(() => deleteQuietly(name))
  const tag = uniq('k')   // a template of its own: no other test's cache entries
  const steps = (last) => Template().fromTemplate('base').runCmd(rnd('r1', ` # ${tag}`)).setEnvs({ MB_K: tag }).runCmd(rnd('r2')).runCmd(last)
  const first = await build(steps(rnd('r3')), name)
  assert.deepEqual(cached(first), [], 'a first build runs every step')
  const s1 = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(s1))
  const [a1, a2, a3] = await read(s1, ['r1', 'r2', 'r3'])
  assert.match(a1 + a2 + a3, /^[0-9a-f]{96}$/)

  // the last step edited: steps 1-3 reused (logged as E2B shows them), the last one runs
  const second = await build(steps(rnd('r3', '; echo edited-step-ran')), name)
  assert.deepEqual(cached(second), [1, 2, 3], second)
  assert.match(second, /CACHED \[1\/4\] RUN od /)
  assert.match(second, /\[4\/4\] RUN od .*edited-step-ran/)
  assert.match(second, /^edited-step-ran$/m, 'the edited step ran')
  const s2 = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(s2))
  const [b1, b2, b3] = await read(s2, ['r1', 'r2', 'r3'])
  assert.deepEqual([b1, b2], [a1, a2], 'the reused steps\' files are the first build\'s')
  assert.notEqual(b3, a3, 'the edited step ran again')
  assert.equal((await s2.commands.run('echo $MB_K')).stdout, `${tag}\n`, 'a cached ENV step still sets the template\'s env')

  // the same steps again: everything cached, nothing runs
  const third = await build(steps(rnd('r3', '; echo edited-step-ran')), name)
  assert.deepEqual(cached(third), [1, 2, 3, 4], third)
  assert.doesNotMatch(third, /^edited-step-ran$/m)

  // skipCache() on the build: every step runs again
  const forced = await build(steps(rnd('r3', '; echo edited-step-ran')), name, { skipCache: true })
  assert.deepEqual(cached(forced), [], forced)
  const s3 = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(s3))
  const c = await read(s3, ['r1', 'r2', 'r3'])
  assert.ok(c[0] !== b1 && c[1] !== b2 && c[2] !== b3, 'every step ran again')

  // a step's force (skipCache() in the chain): the steps before it reused, it and the rest run
  const mid = Template().fromTemplate('base').runCmd(rnd('r1', ` # ${tag}`)).setEnvs({ MB_K: tag }).skipCache().runCmd(rnd('r2')).runCmd(rnd('r3', '; echo edited-step-ran'))
  const partly = await build(mid, name)
  assert.deepEqual(cached(partly), [1, 2], partly)
  const s4 = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(s4))
  const d = await read(s4, ['r1', 'r2', 'r3'])
  assert.equal(d[0], c[0], 'the step before the forced one is reused')
  assert.ok(d[1] !== c[1] && d[2] !== c[2], 'the forced step and the ones after it ran')
})

test('concurrent builds of two templates on the same base both succeed, each with its own steps', TB, async (t) => {
  const [x, y] = [uniq('tbx'), uniq('tby')]
  t.after(() => deleteQuietly(x))
  t.after(() => deleteQuietly(y))
  const common = uniq('c')
  const tpl = (who) => Template().fromTemplate('base').runCmd(`echo ${common} > /home/user/common`).runCmd(`echo ${who} > /home/user/who; sleep 0.5`)
  await Promise.all([build(tpl(x), x), build(tpl(y), y)])
  for (const who of [x, y]) {
    const s = await Sandbox.create(who, { timeoutMs: 60_000 })
    t.after(() => killQuietly(s))
    assert.deepEqual(await read(s, ['common', 'who']), [common, who])
  }
})

test('a template\'s sandboxes share its layers; deleting it unused frees its layers and cache entries', { ...TB, skip: skip || (!sharedStateDir() && 'no MB_SANDBOXD_PID: the state dir is unknown') }, async (t) => {
  const stateDir = sharedStateDir()
  const name = uniq('tbd')
  t.after(() => deleteQuietly(name))
  const tag = uniq('d')
  const info = await Template.build(Template().fromTemplate('base')
    .runCmd(`head -c 4M /dev/urandom > /home/user/blob && sha256sum /home/user/blob > /home/user/blob.sum # ${tag}`)
    .runCmd(`echo ${tag} > /home/user/tag`), name)
  const layers = templateLayers(stateDir, info.templateId)
  assert.equal(layers.length, 2, `one layer per step that changed files: ${layers}`)
  const s = await Sandbox.create(name, { timeoutMs: 60_000 })
  t.after(() => killQuietly(s))
  assert.equal((await s.commands.run('sha256sum -c /home/user/blob.sum >/dev/null && cat /home/user/tag')).stdout, `${tag}\n`)
  const upper = path.join(stateDir, 'sandboxes', s.sandboxId, 'upper', 'home', 'user', 'blob')
  assert.equal(existsSync(upper), false, 'the blob is not copied into the sandbox: its layer is a lower layer of its overlay')
  const cache = () => JSON.parse(readFileSync(path.join(stateDir, 'template-cache.json'), 'utf8')).entries
  assert.ok(layers.every((l) => cache().some((e) => e.layer === l)), 'each step\'s layer is a cache entry')
  assert.equal((await apiFetch(`/templates/${name}`, { method: 'DELETE' })).status, 409)
  await s.kill()
  assert.equal((await apiFetch(`/templates/${name}`, { method: 'DELETE' })).status, 204)
  for (const l of layers) assert.equal(existsSync(path.join(stateDir, 'layers', l)), false, `layer ${l} is removed`)
  assert.ok(!cache().some((e) => layers.includes(e.layer)), 'and its cache entries')
})

test('the cache survives a restart, is bounded (least recently used unused layers go first), and deep templates stay under the layer limit', { ...TB, timeout: 600_000 }, async (t) => {
  let s = await startSandboxd({ env: { SANDBOXD_TEMPLATE_CACHE_ENTRIES: '4' } })
  t.after(() => stopSandboxd(s))
  const o = s.opts
  const name = 'bounded'
  const steps = (v) => Template().fromTemplate('base').runCmd(rnd('r1', ` # ${v}`)).runCmd(rnd('r2')).runCmd(rnd('r3'))
  await Template.build(steps('one'), name, o)
  const oldLayers = templateLayers(s.stateDir, (await (await fetch(`${s.url}/templates/aliases/${name}`, { headers: { 'X-API-KEY': s.key } })).json()).templateID)
  assert.equal(oldLayers.length, 3)
  // another first step: 3 new entries; the old template's layers, no longer used, go over the
  // bound of 4 entries: the top one first (the ones below are held by it), then the next
  await Template.build(steps('two'), name, o)
  const gone = oldLayers.filter((l) => !existsSync(path.join(s.stateDir, 'layers', l)))
  assert.deepEqual(gone, oldLayers.slice(0, 2), 'the two newest unused layers are evicted; the oldest stays cached')
  const entries = JSON.parse(readFileSync(path.join(s.stateDir, 'template-cache.json'), 'utf8')).entries
  assert.equal(entries.length, 4)

  // a restart keeps the cache: the first step of 'one' is still reused
  await stopSandboxd(s)
  s = await startSandboxd({ stateDir: s.stateDir, env: { SANDBOXD_TEMPLATE_CACHE_ENTRIES: '4' } })
  const logs = []
  await Template.build(steps('one'), name, { ...s.opts, onBuildLogs: (l) => logs.push(l.message) })
  assert.deepEqual(cached(logs.join('\n')), [1], logs.join('\n'))

  // 20 steps: past 16 layers the build's layers are merged into one (whiteouts and opaque
  // directories kept), and the template works
  await stopSandboxd(s)
  s = await startSandboxd({ stateDir: s.stateDir })
  let deep = Template().fromTemplate('base').runCmd('echo gone > /home/user/early && mkdir -p /home/user/d && touch /home/user/d/old', { user: 'user' })
  deep = deep.runCmd('rm /home/user/early && rm -rf /home/user/d && mkdir /home/user/d && touch /home/user/d/new').runCmd('rm -f /etc/issue', { user: 'root' })
  for (let i = 4; i <= 20; i++) deep = deep.runCmd(`echo ${i} > /home/user/step${i}`)
  const dlogs = []
  const info = await Template.build(deep, 'deep', { ...s.opts, onBuildLogs: (l) => dlogs.push(l.message) })
  assert.match(dlogs.join('\n'), /Merging \d+ layers into one/)
  assert.ok(templateLayers(s.stateDir, info.templateId).length <= 16)
  const sbx = await Sandbox.create('deep', { ...s.opts, timeoutMs: 60_000 })
  const out = (await sbx.commands.run('ls /home/user/d; test -e /home/user/early || echo early-gone; test -e /etc/issue || echo issue-gone; cat /home/user/step4 /home/user/step20')).stdout
  assert.equal(out, 'new\nearly-gone\nissue-gone\n4\n20\n')
  await sbx.kill()
})
