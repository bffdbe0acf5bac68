// Template builds from a registry image (issue 20 item 4): E2B's `Template().fromImage(ref,
// {username, password})` against a sandboxd of its own, pulling from Debian's `docker-registry`
// on loopback (htpasswd auth; sandboxd started with --insecure-registry for it), with images the
// test builds itself with umoci (the host's bash and its libraries, busybox, a marker file, an
// Env and a WorkingDir in the image config) and pushes with skopeo. Then: the build runs its RUN
// steps on the image's root file system, Sandbox.create from it sees the marker, the image's env
// and workdir and the RUN's result and nothing of the host's /usr; the second build of the ref
// comes from the cache; an unknown image, wrong or missing credentials, an unreachable registry
// and an image without bash fail naming the image and why; the password is in no log. Refusals
// of the request (AWS/GCP registries, unknown fields, malformed references) need no registry.
// Offline: every address is 127.0.0.1. Skipped (with the reason) when a tool is missing, unless
// CI is set: then it fails.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync, mkdirSync, writeFileSync, copyFileSync, chmodSync, symlinkSync, readFileSync, rmSync, realpathSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Sandbox, SDK_PACKAGE, apiFetch, killQuietly, uniq, freePort, startSandboxd, stopSandboxd, waitFor } from './helpers.mjs'

const { Template } = await import(SDK_PACKAGE)
const TOOLS = ['skopeo', 'umoci', 'docker-registry', 'htpasswd', 'busybox']
const which = (t) => spawnSync('sh', ['-c', `command -v ${t}`], { encoding: 'utf8' }).stdout.trim()
const missing = TOOLS.filter((t) => !which(t))
const noTemplate = typeof Template !== 'function' ? `${SDK_PACKAGE} has no Template builder` : false
const skip = noTemplate || (missing.length && !process.env.CI
  ? `needs ${missing.join(', ')} (Debian: skopeo umoci docker-registry apache2-utils busybox-static; scripts/install-deps.sh)` : false)
const TI = { timeout: 240_000, skip }
const USER = 'mbuser'
const PASSWORD = `pw-${uniq('')}-secret`

let work, regPort, registry, sbxd
const ref = (name) => `127.0.0.1:${regPort}/${name}`

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...opts })
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}: ${r.stderr}${r.stdout}`)
  return r.stdout
}

/** A file of the host copied to the same path under root (its symlinks followed). */
function copyIn(root, file, mode = 0o755) {
  const dst = path.join(root, file)
  mkdirSync(path.dirname(dst), { recursive: true })
  copyFileSync(realpathSync(file), dst)
  chmodSync(dst, mode)
}

/** The shared libraries ldd names for a host program (the loader included). */
function libsOf(prog) {
  const out = spawnSync('ldd', [prog], { encoding: 'utf8' }).stdout ?? ''
  return [...out.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x/g)].map((m) => m[1])
}

/** An OCI image built with umoci from a directory tree, tagged `tag` in the layout, config set. */
function buildImage(layout, tag, root, config) {
  const rootless = process.getuid() === 0 ? [] : ['--rootless']
  run('umoci', ['new', '--image', `${layout}:${tag}`])
  run('umoci', ['insert', ...rootless, '--image', `${layout}:${tag}`, root, '/'])
  if (config.length) run('umoci', ['config', ...rootless, '--image', `${layout}:${tag}`, ...config])
}

before(async () => {
  if (skip) return
  if (missing.length) throw new Error(`CI is set and ${missing.join(', ')} missing (scripts/install-deps.sh installs them)`)
  work = mkdtempSync(path.join(tmpdir(), 'mb-img-'))
  // the registry: loopback, its storage in the temp dir, htpasswd (bcrypt) auth
  regPort = await freePort()
  const pw = spawnSync('htpasswd', ['-iBn', USER], { input: PASSWORD, encoding: 'utf8' })
  assert.equal(pw.status, 0, pw.stderr)
  writeFileSync(path.join(work, 'htpasswd'), pw.stdout)
  mkdirSync(path.join(work, 'storage'))
  writeFileSync(path.join(work, 'registry.yml'), [
    'version: 0.1', 'log:', '  level: warn', 'storage:', '  filesystem:', `    rootdirectory: ${work}/storage`,
    'http:', `  addr: 127.0.0.1:${regPort}`, `  secret: ${uniq('s')}`,
    'auth:', '  htpasswd:', '    realm: moonbox-test', `    path: ${work}/htpasswd`, ''].join('\n'))
  let regLog = ''
  registry = spawn('docker-registry', ['serve', path.join(work, 'registry.yml')], { stdio: ['ignore', 'pipe', 'pipe'] })
  registry.stdout.on('data', (d) => (regLog += d))
  registry.stderr.on('data', (d) => (regLog += d))
  await waitFor(async () => (await fetch(`http://127.0.0.1:${regPort}/v2/`)).status === 401,
    { timeoutMs: 20_000, what: `docker-registry on ${regPort} (${regLog})` })

  // the images: bash and its libraries, busybox for the usual commands, a marker, an env, a workdir
  const layout = path.join(work, 'layout')
  run('umoci', ['init', '--layout', layout])
  const root = path.join(work, 'root')
  mkdirSync(path.join(root, 'bin'), { recursive: true })
  mkdirSync(path.join(root, 'srv', 'app'), { recursive: true })
  mkdirSync(path.join(root, 'etc'), { recursive: true })
  copyFileSync(realpathSync(which('bash')), path.join(root, 'bin', 'bash'))
  chmodSync(path.join(root, 'bin', 'bash'), 0o755)
  for (const lib of libsOf(which('bash'))) copyIn(root, lib)
  copyFileSync(realpathSync(which('busybox')), path.join(root, 'bin', 'busybox'))
  chmodSync(path.join(root, 'bin', 'busybox'), 0o755)
  for (const lib of libsOf(which('busybox'))) copyIn(root, lib)
  for (const a of ['cat', 'ls', 'mkdir', 'id', 'sh', 'stat', 'chown', 'env']) symlinkSync('busybox', path.join(root, 'bin', a))
  writeFileSync(path.join(root, 'marker.txt'), 'marker from the image\n')
  writeFileSync(path.join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\n')
  writeFileSync(path.join(root, 'etc', 'group'), 'root:x:0:\n')
  writeFileSync(path.join(root, 'etc', 'resolv.conf'), 'nameserver 192.0.2.1\n')   // the sandbox's replaces it
  buildImage(layout, 'full', root, ['--config.env', 'MB_IMAGE_ENV=from-the-image', '--config.env', 'PATH=/bin', '--config.workingdir', '/srv/app'])
  const bare = path.join(work, 'bare')
  mkdirSync(path.join(bare, 'bin'), { recursive: true })
  copyFileSync(realpathSync(which('busybox')), path.join(bare, 'bin', 'busybox'))
  chmodSync(path.join(bare, 'bin', 'busybox'), 0o755)
  for (const lib of libsOf(which('busybox'))) copyIn(bare, lib)
  symlinkSync('busybox', path.join(bare, 'bin', 'sh'))
  buildImage(layout, 'nobash', bare, [])
  // pushed with credentials from an auth file only we can read (not on a command line)
  const auth = path.join(work, 'auth.json')
  writeFileSync(auth, JSON.stringify({ auths: { [`127.0.0.1:${regPort}`]: { auth: Buffer.from(`${USER}:${PASSWORD}`).toString('base64') } } }), { mode: 0o600 })
  for (const [tag, name] of [['full', 'test/img:1'], ['nobash', 'test/nobash:1']])
    run('skopeo', ['--insecure-policy', 'copy', '--authfile', auth, '--dest-tls-verify=false', `oci:${layout}:${tag}`, `docker://${ref(name)}`])
  sbxd = await startSandboxd({ args: ['--insecure-registry', `127.0.0.1:${regPort}`] })
})

after(async () => {
  await stopSandboxd(sbxd)
  if (registry) {
    registry.kill('SIGTERM')
    await new Promise((r) => (registry.exitCode !== null ? r() : registry.on('exit', r)))
  }
  if (sbxd) rmSync(sbxd.stateDir, { recursive: true, force: true })
  if (work) rmSync(work, { recursive: true, force: true })
})

const deleteQuietly = (name) => fetch(`${sbxd.url}/templates/${encodeURIComponent(name)}`, { method: 'DELETE', headers: { 'X-API-KEY': sbxd.key } }).catch(() => {})

/** Template.build against the private sandboxd: the info, or the error; the log lines either way. */
async function build(tpl, name) {
  const logs = []
  const r = await Template.build(tpl, name, { ...sbxd.opts, onBuildLogs: (l) => logs.push(l.message ?? String(l)) }).then((info) => ({ info }), (err) => ({ err }))
  return { ...r, logs }
}

test('fromImage with registry credentials: the image is the root, its env and workdir apply, RUN runs on it', TI, async (t) => {
  const name = uniq('ti')
  t.after(() => deleteQuietly(name))
  const tpl = Template().fromImage(ref('test/img:1'), { username: USER, password: PASSWORD })
    .runCmd('echo "$MB_IMAGE_ENV" > /tmp/run-result && id -un >> /tmp/run-result && echo "$PWD" >> /tmp/run-result')
    .runCmd('mkdir -p /opt/built && echo made-as-root > /opt/built/flag', { user: 'root' })
  const { info, err, logs } = await build(tpl, name)
  assert.ok(info, `the build succeeds: ${err?.message}\n${logs.join('\n')}`)
  const text = logs.join('\n')
  assert.match(text, /Base image 127\.0\.0\.1:\d+\/test\/img:1 \(with the registry credentials given\)/)
  assert.match(text, /Image 127\.0\.0\.1:\d+\/test\/img:1: sha256:[0-9a-f]{64}\n/, 'pulled (not from the cache)')
  assert.ok(!text.includes(PASSWORD), 'the password is in no build log line')

  const sbx = await Sandbox.create(name, { ...sbxd.opts, timeoutMs: 120_000 })
  t.after(() => killQuietly(sbx))
  const sh = async (cmd, opts) => (await sbx.commands.run(cmd, opts)).stdout
  assert.equal(await sh('cat /marker.txt'), 'marker from the image\n', 'the image\'s files')
  assert.equal(await sh('cat /tmp/run-result'), 'from-the-image\nuser\n/srv/app\n', 'RUN ran with the image\'s env and workdir, as user')
  assert.equal(await sh('cat /opt/built/flag; stat -c %U /opt/built/flag'), 'made-as-root\nroot\n', 'RUN as root')
  assert.equal(await sh('echo "$MB_IMAGE_ENV $PATH"; echo "$PWD"'), 'from-the-image /bin\n/srv/app\n', 'the template\'s envs and workdir in its sandboxes')
  assert.equal(await sh('[ -e /usr/bin/env ] && echo host-usr || echo no-usr; [ -e /etc/os-release ] && echo host-etc || echo own-etc'), 'no-usr\nown-etc\n',
    'nothing of the host\'s system directories')
  assert.match(await sh('cat /etc/resolv.conf'), /sandboxd/, 'the sandbox\'s resolv.conf, not the image\'s')
  assert.equal(await sh('id -un; echo $HOME', { user: 'root' }), 'root\n/root\n')

  // the same reference again: its manifest is asked for, nothing is downloaded
  const again = uniq('ti2')
  t.after(() => deleteQuietly(again))
  const second = await build(Template().fromImage(ref('test/img:1'), { username: USER, password: PASSWORD }).runCmd('echo second > "$HOME/second"'), again)
  assert.ok(second.info, second.err?.message)
  assert.match(second.logs.join('\n'), /sha256:[0-9a-f]{64}, cached/, 'the second build reuses the cached image')
  assert.ok(!second.logs.some((l) => /Copying blob/.test(l)), 'no blob is copied again')
  const cache = JSON.parse(readFileSync(path.join(sbxd.stateDir, 'images.json'), 'utf8'))
  assert.equal(cache.length, 1, JSON.stringify(cache))
  assert.equal(cache[0].ref, ref('test/img:1'))
  assert.ok(!JSON.stringify(cache).includes(PASSWORD))
  const s2 = await Sandbox.create(again, { ...sbxd.opts, timeoutMs: 120_000 })
  t.after(() => killQuietly(s2))
  assert.equal((await s2.commands.run('cat /home/user/second /marker.txt')).stdout, 'second\nmarker from the image\n')
  assert.ok(!sbxd.log().includes(PASSWORD), 'the password is not in sandboxd\'s output')

  // a restart keeps the cache and the image's layer (templates on it and the cached image alike)
  await killQuietly(sbx)
  await killQuietly(s2)
  await stopSandboxd(sbxd)
  sbxd = await startSandboxd({ stateDir: sbxd.stateDir, args: ['--insecure-registry', `127.0.0.1:${regPort}`] })
  const s3 = await Sandbox.create(name, { ...sbxd.opts, timeoutMs: 120_000 })
  t.after(() => killQuietly(s3))
  assert.equal((await s3.commands.run('cat /marker.txt /tmp/run-result')).stdout, 'marker from the image\nfrom-the-image\nuser\n/srv/app\n')
  const third = uniq('ti3')
  t.after(() => deleteQuietly(third))
  const r3 = await build(Template().fromImage(ref('test/img:1'), { username: USER, password: PASSWORD }), third)
  assert.ok(r3.info, r3.err?.message)
  assert.match(r3.logs.join('\n'), /, cached/, 'still cached after a restart')
})

test('a pull that cannot happen fails the build naming the image and the registry\'s reason', TI, async (t) => {
  const closed = await freePort()
  const cases = [
    [Template().fromImage(ref('test/nosuch:1'), { username: USER, password: PASSWORD }).runCmd('true'), /test\/nosuch:1' cannot be pulled: .*manifest unknown/],
    [Template().fromImage(ref('test/img:1'), { username: USER, password: 'wrong-password' }).runCmd('true'), /test\/img:1' cannot be pulled: .*(unauthorized|authentication required)/],
    [Template().fromImage(ref('test/img:1')).runCmd('true'), /test\/img:1' cannot be pulled: .*(unauthorized|authentication required)/],
    [Template().fromImage(`127.0.0.1:${closed}/test/img:1`).runCmd('true'), new RegExp(`127\\.0\\.0\\.1:${closed}/test/img:1' cannot be pulled: .*connection refused`)],
    [Template().fromImage(ref('test/nobash:1'), { username: USER, password: PASSWORD }).runCmd('true'), /test\/nobash:1' has no \/bin\/bash/],
  ]
  for (const [tpl, re] of cases) {
    const name = uniq('tif')
    t.after(() => deleteQuietly(name))
    const { info, err } = await build(tpl, name)
    assert.ok(!info && err, `the build fails (${re})`)
    assert.equal(err.name, 'BuildError', String(err))
    assert.match(err.message, re)
    assert.ok(!err.message.includes('wrong-password') && !err.message.includes(PASSWORD), 'no password in the reason')
  }
  assert.ok(!sbxd.log().includes('wrong-password'))
})

test('fromImageRegistry: only type registry; unknown fields and malformed references are refused by name', { timeout: 60_000, skip: noTemplate }, async () => {
  const res = await apiFetch('/v3/templates', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ name: uniq('tir') }) })
  assert.equal(res.status, 202)
  const { templateID, buildID } = await res.json()
  try {
    const refusals = [
      [{ fromImage: 'r.example/a:1', fromImageRegistry: { type: 'aws', awsAccessKeyId: 'k', awsSecretAccessKey: 's', awsRegion: 'eu-west-1' } }, /fromImageRegistry\.type 'aws' \(AWS ECR\) is not supported/],
      [{ fromImage: 'r.example/a:1', fromImageRegistry: { type: 'gcp', serviceAccountJson: '{}' } }, /fromImageRegistry\.type 'gcp' .*not supported/],
      [{ fromImage: 'r.example/a:1', fromImageRegistry: { type: 'registry', username: 'u', password: 'p', token: 'x' } }, /fromImageRegistry\.field 'token'/],
      [{ fromImage: 'r.example/a:1', fromImageRegistry: { type: 'registry', username: 'u' } }, /both 'username' and 'password'/],
      [{ fromTemplate: 'base', fromImageRegistry: { type: 'registry', username: 'u', password: 'p' } }, /with 'fromImage'/],
      [{ fromImage: 'r.example/A:1' }, /'fromImage': 'r\.example\/A:1' is not an image reference/],
      [{ fromImage: 'r.example:99999/a' }, /not a registry host/],
    ]
    for (const [body, re] of refusals) {
      const r = await apiFetch(`/v2/templates/${templateID}/builds/${buildID}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ steps: [], ...body }) })
      const b = await r.json()
      assert.equal(r.status, 400, JSON.stringify(b))
      assert.match(b.message, re)
      assert.ok(!b.message.includes('"p"'), 'no credential echoed')
    }
  } finally {
    await apiFetch(`/templates/${templateID}`, { method: 'DELETE' }).catch(() => {})
  }
})

test('the tools this suite needs are present in CI', { skip: !process.env.CI && 'CI is not set' }, () => {
  assert.deepEqual(missing, [], 'scripts/install-deps.sh installs skopeo, umoci, docker-registry, apache2-utils, busybox-static')
})
