// Templates as sandboxd has them today (issue 20 is the builder): GET /templates lists base and
// the snapshots (E2B lists snapshots as templates), GET /templates/aliases/{alias} answers the
// SDK's Template.exists / aliasExists; a build is still 501.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, killQuietly, apiFetch, uniq, SDK_PACKAGE } from './helpers.mjs'

const { Template } = await import(SDK_PACKAGE)
const exists = Template && (Template.exists ?? Template.aliasExists)

test('GET /templates lists base and every snapshot; aliases name them', T, async (t) => {
  const src = await newSandbox(t)
  const name = uniq('tpl')
  const snap = await src.createSnapshot({ name })
  try {
    const res = await apiFetch('/templates?teamID=any')
    assert.equal(res.status, 200)
    const list = await res.json()
    const base = list.find((x) => x.templateID === 'base')
    assert.ok(base, JSON.stringify(list))
    assert.deepEqual([base.aliases, base.buildStatus, base.public], [['base'], 'ready', true])
    for (const k of ['cpuCount', 'memoryMB', 'diskSizeMB', 'buildCount', 'spawnCount']) assert.equal(typeof base[k], 'number', k)
    const mine = list.find((x) => x.names.includes(name))
    assert.ok(mine, `the snapshot ${name} is listed: ${JSON.stringify(list)}`)
    assert.equal(mine.public, false)
    assert.ok(!Number.isNaN(Date.parse(mine.createdAt)))
    const alias = await (await apiFetch(`/templates/aliases/${name}`)).json()
    assert.deepEqual(alias, { templateID: mine.templateID, public: false })
    assert.equal((await apiFetch('/templates/aliases/no-such-template')).status, 404)
    assert.equal((await apiFetch('/templates?limit=3')).status, 400)   // unknown parameters are refused
    if (exists) {
      assert.equal(await exists.call(Template, 'base'), true)
      assert.equal(await exists.call(Template, name), true)
      assert.equal(await exists.call(Template, 'no-such-template'), false)
    }
  } finally {
    await apiFetch(`/templates/${encodeURIComponent(snap.snapshotId)}`, { method: 'DELETE' })
    await killQuietly(src)
  }
  const gone = await (await apiFetch('/templates')).json()
  assert.ok(!gone.some((x) => x.names.includes(name)), 'a deleted snapshot is no longer listed')
})
