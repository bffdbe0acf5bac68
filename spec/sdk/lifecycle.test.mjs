// Control-plane lifecycle: create/getInfo/list/setTimeout/connect/pause/kill through the SDK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import {
  T,
  newSandbox,
  uniq,
  waitFor,
  killQuietly,
  hostProcessesWith,
  hostMountsWith,
  pathsUnder,
  sharedStateDir,
  marker,
  Sandbox,
  SandboxNotFoundError,
} from './helpers.mjs'

const semverAtLeast = (v, min) => {
  const a = v.split(/[.+-]/).slice(0, 3).map(Number)
  const b = min.split('.').map(Number)
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i]
  return true
}

test('create, isRunning and getInfo (instance and static) describe the sandbox', T, async (t) => {
  const tag = uniq('c')
  const sbx = await newSandbox(t, { metadata: { tag, second: 'two' } })
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
  assert.equal(await sbx.isRunning(), true)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.equal(info.metadata.tag, tag)
  assert.equal(info.metadata.second, 'two')
  assert.match(info.envdVersion, /^\d+\.\d+\.\d+/)
  assert.ok(semverAtLeast(info.envdVersion, '0.6.3'), `envdVersion ${info.envdVersion} >= 0.6.3`)
  assert.ok(info.startedAt instanceof Date && info.endAt instanceof Date)
  assert.ok(info.endAt > info.startedAt)
  const s = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(s.sandboxId, sbx.sandboxId)
  assert.deepEqual(s.metadata, info.metadata)
})

test('list filters by metadata and by state', T, async (t) => {
  const group = uniq('g')
  const a = await newSandbox(t, { metadata: { group, who: 'a' } })
  const b = await newSandbox(t, { metadata: { group, who: 'b' } })
  await newSandbox(t, { metadata: { group: uniq('other') } })

  const all = await Sandbox.list({ query: { metadata: { group } } }).nextItems()
  assert.deepEqual(all.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
  const onlyA = await Sandbox.list({ query: { metadata: { group, who: 'a' } } }).nextItems()
  assert.deepEqual(onlyA.map((s) => s.sandboxId), [a.sandboxId])
  assert.equal(onlyA[0].metadata.who, 'a')
  assert.equal(onlyA[0].state, 'running')
  assert.equal(onlyA[0].templateId, 'base')

  assert.equal(await b.pause(), true)
  const running = await Sandbox.list({ query: { metadata: { group }, state: ['running'] } }).nextItems()
  assert.deepEqual(running.map((s) => s.sandboxId), [a.sandboxId])
  const paused = await Sandbox.list({ query: { metadata: { group }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [b.sandboxId])
  assert.equal(paused[0].state, 'paused')
  const both = await Sandbox.list({ query: { metadata: { group }, state: ['running', 'paused'] } }).nextItems()
  assert.equal(both.length, 2)
})

test('list paginates with limit and x-next-token, newest first', T, async (t) => {
  const group = uniq('p')
  const made = []
  for (let i = 0; i < 3; i++) made.push(await newSandbox(t, { metadata: { group } }))
  const pager = Sandbox.list({ query: { metadata: { group } }, limit: 1 })
  const seen = []
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    pages++
    assert.ok(items.length <= 1, `page of ${items.length} with limit 1`)
    seen.push(...items.map((s) => s.sandboxId))
    if (pages > 10) break
    if (pager.hasNext) assert.ok(pager.nextToken, 'next token present while hasNext')
  }
  assert.deepEqual(seen, made.map((s) => s.sandboxId).reverse())
  assert.equal(pager.hasNext, false)
})

test('setTimeout short: the sandbox is gone after expiry and leaves nothing on the host', T, async (t) => {
  const sbx = await newSandbox(t)
  const mk = marker(4)
  await sbx.commands.run(`sleep ${mk}`, { background: true, timeoutMs: 0 })
  await waitFor(() => hostProcessesWith(`sleep ${mk}`).length > 0, { what: 'the sandbox sleep to be visible on the host' })
  const before = (await sbx.getInfo()).endAt
  await sbx.setTimeout(2000)
  const after = (await Sandbox.getInfo(sbx.sandboxId)).endAt
  assert.ok(after < before, 'setTimeout may shorten the deadline')
  await waitFor(async () => !(await sbx.isRunning()), { timeoutMs: 30_000, intervalMs: 250, what: 'expiry' })
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  const listed = await Sandbox.list({ query: { metadata: { moonboxTest: sbx.mbTag } } }).nextItems()
  assert.equal(listed.length, 0)
  await waitFor(() => hostProcessesWith(`sleep ${mk}`).length === 0, { what: 'sandbox processes to be gone from the host' })
  assert.deepEqual(hostMountsWith(sbx.sandboxId), [])
  const state = sharedStateDir()
  if (state) assert.deepEqual(pathsUnder(state, sbx.sandboxId), [])
  else t.diagnostic('MB_SANDBOXD_PID not set: state-directory check skipped')
})

test('setTimeout can lengthen again after shortening', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.setTimeout(30_000)
  const short = (await sbx.getInfo()).endAt
  await sbx.setTimeout(200_000)
  const long = (await sbx.getInfo()).endAt
  assert.ok(long > short)
  assert.equal(await sbx.isRunning(), true)
})

test('connect extends the timeout but never shortens it', T, async (t) => {
  const sbx = await newSandbox(t, { timeoutMs: 120_000 })
  const e0 = (await sbx.getInfo()).endAt
  const c1 = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 })
  assert.equal(c1.sandboxId, sbx.sandboxId)
  const e1 = (await sbx.getInfo()).endAt
  assert.ok(e1.getTime() >= e0.getTime(), `connect with a shorter timeout must not shorten (${e0.toISOString()} → ${e1.toISOString()})`)
  await sbx.connect({ timeoutMs: 600_000 })
  const e2 = (await sbx.getInfo()).endAt
  assert.ok(e2 > e1, 'connect with a longer timeout extends')
  assert.equal((await c1.commands.run('echo via-connect')).stdout, 'via-connect\n')
})

test('pause freezes the sandbox (isRunning false), connect resumes it with files and processes intact', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('before-pause.txt', 'kept')
  const bg = await sbx.commands.run('sleep 900', { background: true, timeoutMs: 0 })
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.isRunning(), false)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'pausing a paused sandbox answers 409 → false')
  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal(await resumed.isRunning(), true)
  assert.equal((await resumed.getInfo()).state, 'running')
  assert.equal(await resumed.files.read('before-pause.txt'), 'kept')
  await resumed.commands.run(`kill -0 ${bg.pid}`)
  assert.equal((await resumed.commands.run('echo alive')).stdout, 'alive\n')
})

test('kill: connect/getInfo then → SandboxNotFoundError, second kill and unknown id → false', T, async (t) => {
  const sbx = await newSandbox(t)
  const id = sbx.sandboxId
  const mk = marker(5)
  await sbx.commands.run(`sleep ${mk}`, { background: true, timeoutMs: 0 })
  await waitFor(() => hostProcessesWith(`sleep ${mk}`).length > 0, { what: 'the sandbox sleep on the host' })
  assert.equal(await Sandbox.kill(id), true)
  await waitFor(() => hostProcessesWith(`sleep ${mk}`).length === 0, { what: 'killed sandbox processes to be gone from the host' })
  assert.deepEqual(hostMountsWith(id), [])
  const state = sharedStateDir()
  if (state) assert.deepEqual(pathsUnder(state, id), [])
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(Sandbox.connect(id), SandboxNotFoundError)
  await assert.rejects(Sandbox.getInfo(id), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(id), false)
  assert.equal(await Sandbox.kill('nosuchsandbox0000000'), false)
  const listed = await Sandbox.list({ query: { state: ['running', 'paused'] } }).nextItems()
  assert.ok(!listed.some((s) => s.sandboxId === id))
  await killQuietly(sbx)
})
