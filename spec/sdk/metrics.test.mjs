// getMetrics (issue 10 item 4): CPU from the sandbox's cpuacct cgroup, memory from its memory
// cgroup, disk from what its upper layers hold. A sample is taken when asked (at most one a
// second, the newest 720 kept); start/end select them.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, apiFetch, assertApiError, sleep, Sandbox, SandboxNotFoundError } from './helpers.mjs'

const MiB = 1048576

/** The next sample: past the one-a-second rate of sampling, then the newest. */
async function nextSample(sbx) {
  await sleep(1100)
  const all = await sbx.getMetrics()
  return all[all.length - 1]
}

test('getMetrics: every field, and what the sandbox does shows in CPU, memory and disk', T, async (t) => {
  const sbx = await newSandbox(t)
  const first = await sbx.getMetrics()
  assert.equal(first.length, 1)
  const m = first[0]
  for (const k of ['cpuCount', 'cpuUsedPct', 'memUsed', 'memTotal', 'memCache', 'diskUsed', 'diskTotal'])
    assert.equal(typeof m[k], 'number', `${k}: ${m[k]}`)
  assert.ok(m.timestamp instanceof Date && Math.abs(Date.now() - m.timestamp.getTime()) < 60_000)
  assert.ok(m.cpuCount >= 1 && m.memTotal > 0 && m.diskTotal > m.diskUsed)
  assert.equal(m.memTotal, 2048 * MiB, 'the sandbox\'s memory limit')
  // disk: 32 MiB written
  await sbx.commands.run('head -c 33554432 /dev/urandom > /home/user/blob && sync')
  const d = await nextSample(sbx)
  assert.ok(d.diskUsed - m.diskUsed >= 32 * MiB, `disk ${m.diskUsed} → ${d.diskUsed}`)
  // memory: a process holding 64 MiB
  await sbx.commands.run('perl -e \'$x = "a" x 67108864; sleep 120\'', { background: true, timeoutMs: 0 })
  let mem
  for (let i = 0; i < 20 && !(mem?.memUsed - m.memUsed >= 64 * MiB); i++) mem = await nextSample(sbx)
  assert.ok(mem.memUsed - m.memUsed >= 64 * MiB, `memory ${m.memUsed} → ${mem.memUsed}`)
  // CPU: a busy loop between two samples
  await nextSample(sbx)
  await sbx.commands.run('timeout 2 sh -c "while :; do :; done" || true')
  const c = (await sbx.getMetrics()).at(-1)
  assert.ok(c.cpuUsedPct > 0 && c.cpuUsedPct <= 100, `cpu ${c.cpuUsedPct}`)
  // the series holds every sample, oldest first
  const all = await sbx.getMetrics()
  assert.ok(all.length >= 4)
  for (let i = 1; i < all.length; i++) assert.ok(all[i].timestamp >= all[i - 1].timestamp)
})

test('metrics on the wire: start/end select samples, unknown parameters and sandboxes are refused', T, async (t) => {
  const sbx = await newSandbox(t)
  const res = await apiFetch(`/sandboxes/${sbx.sandboxId}/metrics`)
  assert.equal(res.status, 200)
  const [s] = await res.json()
  assert.equal(s.timestampUnix, Math.floor(Date.parse(s.timestamp) / 1000))
  const later = await (await apiFetch(`/sandboxes/${sbx.sandboxId}/metrics?start=${s.timestampUnix + 3600}`)).json()
  assert.deepEqual(later, [])
  const until = await (await apiFetch(`/sandboxes/${sbx.sandboxId}/metrics?end=${s.timestampUnix}`)).json()
  assert.ok(until.length >= 1 && until.every((x) => x.timestampUnix <= s.timestampUnix))
  for (const q of ['start=yesterday', 'end=-1', 'step=5']) {
    const b = await assertApiError(await apiFetch(`/sandboxes/${sbx.sandboxId}/metrics?${q}`), 400, q)
    assert.ok(b.message.includes(`'${q.split('=')[0]}'`), b.message)
  }
  await assertApiError(await apiFetch('/sandboxes/nosuchsandbox0/metrics'), 404, 'unknown')
  await assert.rejects(Sandbox.getMetrics('nosuchsandbox0'), SandboxNotFoundError)
  // a paused sandbox still reports
  await sbx.pause()
  assert.equal((await apiFetch(`/sandboxes/${sbx.sandboxId}/metrics`)).status, 200)
})
