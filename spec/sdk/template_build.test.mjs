// Template builds (issue 20): E2B's own `Template` builder against sandboxd — POST /v3/templates,
// the COPY upload handshake (GET /templates/{id}/files/{hash}, PUT to the URL it names), POST
// /v2/templates/{id}/builds/{id}, GET .../status polled for logs — then Sandbox.create(name) from
// the result: the RUN steps' effects, the copied files (content, mode, owner), the envs and the
// workdir. A failing step fails the build naming the step with its output; unknown fields ⇒ 400.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, writeFileSync, chmodSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Sandbox, SDK_PACKAGE, apiFetch, killQuietly, uniq } from './helpers.mjs'

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

  // deleted while sandboxes use it: they keep running, the name is gone
  assert.equal((await apiFetch(`/templates/${info.templateId}`, { method: 'DELETE' })).status, 204)
  assert.equal((await fresh.commands.run('echo alive')).stdout, 'alive\n')
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
  assert.equal((await apiFetch('/v3/templates', json({ name, tags: ['v2'] }))).status, 400)
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
