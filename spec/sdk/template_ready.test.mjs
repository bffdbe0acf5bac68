// Template start commands and their ready checks (issue 20): each of the SDK's ready-check
// helpers (waitForPort, waitForURL, waitForProcess, waitForFile, waitForTimeout — shell commands
// the SDK makes: `ss`, `curl`, `pgrep`, `[ -f ]`, `sleep`) run by sandboxd at the end of the build
// and at every Sandbox.create from the template, which answers only once the check passed; a
// start command that never gets ready fails the build with the check and the time waited. And
// the end to end: RUN/COPY/ENV/WORKDIR/USER and a server with a port check.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Sandbox, SDK_PACKAGE, apiFetch, killQuietly, uniq, startSandboxd, stopSandboxd } from './helpers.mjs'

const sdk = await import(SDK_PACKAGE)
const { Template } = sdk
const skip = typeof Template !== 'function' ? `${SDK_PACKAGE} has no Template builder` : false
const TB = { timeout: 240_000, skip }

const deleteQuietly = (ref) => apiFetch(`/templates/${encodeURIComponent(ref)}`, { method: 'DELETE' }).catch(() => {})

/** Builds `tpl` as a fresh name (deleted after the test) and creates a sandbox from it. */
async function buildAndCreate(t, tpl, prefix) {
  const name = uniq(prefix)
  t.after(() => deleteQuietly(name))
  await Template.build(tpl, name)
  const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
  t.after(() => killQuietly(sbx))
  return sbx
}
const out = async (sbx, cmd) => (await sbx.commands.run(cmd)).stdout

// Each start command makes what its check looks for only after a second (a marker of this very
// sandbox: its host name), so a create that answered before the check passed would not see it.
test('waitForFile: create answers once the file exists', TB, async (t) => {
  const sbx = await buildAndCreate(t, Template().fromTemplate('base')
    .setStartCmd('sleep 1; hostname > /tmp/ready-file.tmp && mv /tmp/ready-file.tmp /tmp/ready-file; exec sleep 100000',
      sdk.waitForFile('/tmp/ready-file')), 'tbwf')
  assert.equal((await out(sbx, 'cat /tmp/ready-file')).trim(), sbx.sandboxId)
})

test('waitForPort: create answers once the port listens (python3 -m http.server)', TB, async (t) => {
  const sbx = await buildAndCreate(t, Template().fromTemplate('base')
    .runCmd('mkdir -p /tmp/www && echo served-page > /tmp/www/index.txt')
    .setStartCmd('sleep 1; cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1', sdk.waitForPort(8000)), 'tbwp')
  assert.equal(await out(sbx, 'curl -sS http://127.0.0.1:8000/index.txt'), 'served-page\n')
  assert.match(await out(sbx, 'ss -Htln sport = :8000'), /LISTEN/)
})

test('waitForURL: create answers once the URL answers 200', TB, async (t) => {
  // the server listens at once; the page it must answer 200 for appears after a second
  const sbx = await buildAndCreate(t, Template().fromTemplate('base')
    .setStartCmd('mkdir -p /tmp/web && cd /tmp/web || exit 1; (sleep 1; hostname > health.tmp && mv health.tmp health) & exec python3 -m http.server 8001 --bind 127.0.0.1',
      sdk.waitForURL('http://127.0.0.1:8001/health')), 'tbwu')
  assert.equal((await out(sbx, 'curl -sS http://127.0.0.1:8001/health')).trim(), sbx.sandboxId)
})

test('waitForProcess: create answers once the process runs', TB, async (t) => {
  const sbx = await buildAndCreate(t, Template().fromTemplate('base')
    .runCmd('cp /bin/sleep /tmp/mbdaemon')
    .setStartCmd('sleep 1; exec /tmp/mbdaemon 100000', sdk.waitForProcess('mbdaemon')), 'tbwpr')
  assert.match(await out(sbx, 'pgrep -a mbdaemon'), /\/tmp\/mbdaemon 100000/)
})

test('waitForTimeout: create answers once the time has passed', TB, async (t) => {
  // the check is `sleep 2` after the start command started: create answers at least 2 s after it
  const sbx = await buildAndCreate(t, Template().fromTemplate('base')
    .setStartCmd('date +%s%N > /tmp/started; exec sleep 100000', sdk.waitForTimeout(2000)), 'tbwt')
  const [started, now] = (await out(sbx, 'cat /tmp/started; date +%s%N')).trim().split('\n').map(BigInt)
  assert.ok(now - started >= 2_000_000_000n, `answered ${(now - started) / 1_000_000n} ms after the start command started`)
})

test('a start command that never gets ready fails the build, naming the check and the time waited', TB, async (t) => {
  // a sandboxd of its own that waits 2 s for a ready command (--template-ready-timeout)
  const srv = await startSandboxd({ args: ['--template-ready-timeout', '2'] })
  t.after(() => stopSandboxd(srv))
  const logs = []
  const err = await Template.build(Template().fromTemplate('base').setStartCmd('echo started-but-never-ready; exec sleep 100000',
    sdk.waitForFile('/tmp/never')), uniq('tbnr'), { ...srv.opts, onBuildLogs: (l) => logs.push(l.message) }).then(() => null, (e) => e)
  assert.ok(err, 'the build fails')
  assert.equal(err.name, 'BuildError', String(err))
  assert.match(err.message, /ready command `\[ -f .*\/tmp\/never.* \]` did not succeed within 2 s \(last attempt: exit status 1\)/, err.message)
  assert.match(err.message, /started-but-never-ready/, 'with the start command\'s output')
  const list = await (await fetch(`${srv.url}/templates`, { headers: { 'X-API-Key': srv.key } })).json()
  assert.deepEqual(list.map((x) => x.templateID), ['base'], 'nothing is recorded')
})

test('end to end: RUN, COPY, ENV, WORKDIR, USER and a server with a port check', TB, async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mb-tpl-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  writeFileSync(path.join(dir, 'index.html'), '<p>from the build context</p>\n')
  writeFileSync(path.join(dir, 'serve.sh'), '#!/bin/sh\necho "$APP_GREETING" > status.txt\nexec python3 -m http.server "$APP_PORT" --bind 127.0.0.1\n')
  const tpl = Template({ fileContextPath: dir })
    .fromTemplate('base')
    .runCmd('mkdir -p /srv/app && chown user: /srv/app', { user: 'root' })
    .setWorkdir('/srv/app')
    .copy('index.html', 'index.html')
    .copy('serve.sh', '/srv/app/serve.sh', { mode: 0o755 })
    .setEnvs({ APP_PORT: '8080', APP_GREETING: 'hello-from-env' })
    .setUser('root')
    .runCmd('id -un > /srv/app/built-by')
    .setUser('user')
    .setStartCmd('./serve.sh', sdk.waitForPort(8080))
  const sbx = await buildAndCreate(t, tpl, 'tbe2e')
  assert.equal(await out(sbx, 'curl -sS http://127.0.0.1:8080/index.html'), '<p>from the build context</p>\n', 'the server serves the copied file')
  assert.equal(await out(sbx, 'cat status.txt'), 'hello-from-env\n', 'the start command ran in the workdir with the envs')
  assert.equal(await out(sbx, 'cat /srv/app/built-by; stat -c "%a %U" serve.sh'), 'root\n755 user\n', 'USER root ran the RUN; COPY mode')
  assert.equal(await out(sbx, 'echo "$APP_PORT $APP_GREETING"; pwd'), '8080 hello-from-env\n/srv/app\n', 'envs and workdir in the sandbox')
  assert.match(await out(sbx, 'ps -o user=,args= -C python3'), /^user +python3 -m http.server 8080/m, 'the start command runs as the last USER')
})
