// The E2B CLI (@e2b/cli, pinned in package.json) against sandboxd (issue 20): `e2b template list`
// lists base, a template built with the SDK's Template builder and a snapshot, as E2B lists them
// (GET /templates); `e2b template delete` deletes one by name. The CLI is pointed at sandboxd by
// E2B_API_URL and E2B_API_KEY (its bundled SDK's ConnectionConfig reads them), with a HOME of its
// own so that no user config of the machine is read; it is run with node directly (not npx, which
// asks the npm registry for updates) and without a terminal (its update check runs on a TTY only).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { SDK_PACKAGE, HERE, apiFetch, newSandbox, killQuietly, requireEnv, uniq } from './helpers.mjs'

const { Template } = await import(SDK_PACKAGE)
const CLI_DIR = path.join(HERE, 'node_modules', '@e2b', 'cli')
let cli = null
try {
  const pkg = JSON.parse(readFileSync(path.join(CLI_DIR, 'package.json'), 'utf8'))
  cli = path.join(CLI_DIR, typeof pkg.bin === 'string' ? pkg.bin : pkg.bin.e2b)
} catch {
  /* not installed: skipped */
}
const skip = !cli ? '@e2b/cli is not installed (scripts/install-deps.sh)' : typeof Template !== 'function' ? `${SDK_PACKAGE} has no Template builder` : false
const TB = { timeout: 180_000, skip }

/** Runs the CLI with args; resolves {code, stdout, stderr}. */
function e2b(t, args) {
  const { api, key } = requireEnv()
  const home = mkdtempSync(path.join(tmpdir(), 'mb-e2bcli-'))
  t.after(() => rmSync(home, { recursive: true, force: true }))
  const env = { PATH: process.env.PATH, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'), E2B_API_URL: api, E2B_API_KEY: key, NO_COLOR: '1' }
  return new Promise((resolve) => {
    execFile(process.execPath, [cli, ...args], { env, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }))
  })
}

test('e2b template list: base, a built template and a snapshot', TB, async (t) => {
  const built = uniq('tbcli')
  const snapName = uniq('tbclisnap')
  t.after(() => apiFetch(`/templates/${built}`, { method: 'DELETE' }).catch(() => {}))
  const info = await Template.build(Template().fromTemplate('base').runCmd('echo built > /tmp/built'), built, { cpuCount: 1, memoryMB: 512 })
  const src = await newSandbox(t)
  const snap = await src.createSnapshot({ name: snapName })
  t.after(() => apiFetch(`/templates/${encodeURIComponent(snap.snapshotId)}`, { method: 'DELETE' }).catch(() => {}))
  await killQuietly(src)

  const res = await e2b(t, ['template', 'list', '--format', 'json'])
  assert.equal(res.code, 0, res.stderr)
  const list = JSON.parse(res.stdout)
  const byName = (n) => list.find((x) => x.aliases.includes(n))
  assert.ok(byName('base'), res.stdout)
  assert.deepEqual([byName('base').templateID, byName('base').public, byName('base').buildStatus], ['base', true, 'ready'])
  const b = byName(built)
  assert.ok(b, `the built template is listed: ${res.stdout}`)
  assert.deepEqual([b.templateID, b.public, b.buildStatus, b.cpuCount, b.memoryMB], [info.templateId, false, 'ready', 1, 512],
    'with the limits its build asked for')
  assert.ok(byName(snapName), `the snapshot is listed: ${res.stdout}`)
  // the same listing as the table a user reads
  const pretty = await e2b(t, ['template', 'list'])
  assert.equal(pretty.code, 0, pretty.stderr)
  for (const want of [/^Public +base +base\b/m, new RegExp(`^Private +${info.templateId} +${built} +1 +512\\b`, 'm'), new RegExp(`^Private +\\S+ +${snapName}\\b`, 'm')])
    assert.match(pretty.stdout, want)

  // deleted by name with the CLI, then no longer listed
  const del = await e2b(t, ['template', 'delete', built, '--yes'])
  assert.equal(del.code, 0, del.stdout + del.stderr)
  const after = JSON.parse((await e2b(t, ['template', 'list', '--format', 'json'])).stdout)
  assert.ok(!after.some((x) => x.aliases.includes(built)), 'deleted')
  assert.ok(after.some((x) => x.aliases.includes(snapName)), 'the others stay')
})

test('the CLI with a wrong API key: 401, said', TB, async (t) => {
  const { api } = requireEnv()
  const home = mkdtempSync(path.join(tmpdir(), 'mb-e2bcli-'))
  t.after(() => rmSync(home, { recursive: true, force: true }))
  const res = await new Promise((resolve) => {
    execFile(process.execPath, [cli, 'template', 'list'], {
      env: { PATH: process.env.PATH, HOME: home, E2B_API_URL: api, E2B_API_KEY: 'e2b_' + 'f'.repeat(40), NO_COLOR: '1' }, timeout: 60_000,
    }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, out: stdout + stderr }))
  })
  assert.notEqual(res.code, 0)
  assert.match(res.out, /401/)
})
