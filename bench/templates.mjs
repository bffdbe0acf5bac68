// templates — template builds and the sandboxes made from them (issue 20), through the unmodified
// e2b SDK's Template builder (spec/sdk's e2b-latest) against the sandboxd at E2B_API_URL (run it
// without a warm pool, SANDBOXD_WARM_POOL=0, so a create from base boots as one from a template
// does). Each figure is a ratio of medians to a baseline measured in the same run, samples taken
// in turn so that machine noise hits both series alike:
//   a. create    Sandbox.create(T) → commands.run('true') exits, T a template whose one RUN step
//                wrote BENCH_BIG_MB MiB (default 1024) of random data, vs the same from base;
//                BENCH_N × 2 samples each (goal ≤ 1.2×: creation does not copy the template)
//   b. rebuild   Template.build of a 3-step template whose last step was edited (the first two
//                reused from the cache), vs Sandbox.create('base') + commands.run(that step)
//                (goal ≤ 1.3×)
//   c. first     Template.build of the 3-step template with skipCache (every step runs), vs
//                Sandbox.create('base') + commands.run of the 3 commands in turn (goal ≤ 1.5×)
// For b and c the build's own time (its first to its last log entry, sandboxd's clock) is given
// too: the SDK polls a build's status every 200 ms, which the wall-clock figure includes. Kills
// and deletes are not timed. Environment: E2B_API_URL, E2B_API_KEY (required); BENCH_N (default
// 5); BENCH_BIG_MB. Prints a summary, then `RESULT {json}`.
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { Sandbox, Template } = await import(pathToFileURL(path.join(ROOT, 'spec/sdk/node_modules/e2b-latest/dist/index.mjs')).href)

if (!process.env.E2B_API_URL || !process.env.E2B_API_KEY) {
  console.error('templates: set E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (bench/templates.sh does)')
  process.exit(2)
}
const N = Math.max(3, Number(process.env.BENCH_N || 5))
const BIG_MB = Math.max(1, Number(process.env.BENCH_BIG_MB || 1024))
const median = (a) => {
  const s = [...a].sort((x, y) => x - y)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}
const now = () => Number(process.hrtime.bigint()) / 1e6
const f2 = (x) => x.toFixed(2)
const goal = (r, g) => `${f2(r)}× (goal ≤ ${g}×: ${r <= g ? 'met' : 'not met'})`

// Three steps of real work (≈ 0.3-0.5 s each here): random data written, hashed, read back.
const work = (i, salt = '') => `head -c 96M /dev/urandom > /home/user/f${i} && sha256sum /home/user/f${i} > /home/user/f${i}.sum && wc -c < /home/user/f${i} >/dev/null${salt}`

async function build(tpl, name, opts = {}) {
  const t0 = now()
  const info = await Template.build(tpl, name, opts)
  const wall = now() - t0
  // sandboxd's own log of the build (the SDK adds entries of its own to onBuildLogs)
  const res = await fetch(`${process.env.E2B_API_URL}/templates/${info.templateId}/builds/${info.buildId}/status?logsOffset=0`,
    { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  const stamps = (await res.json()).logEntries.map((e) => Date.parse(e.timestamp))
  return { wall, own: Math.max(...stamps) - Math.min(...stamps) }
}

async function createRun(template, cmds) {
  const t0 = now()
  const s = await Sandbox.create(template, { timeoutMs: 600_000 })
  for (const c of cmds) {
    const r = await s.commands.run(c, { timeoutMs: 600_000 })
    if (r.exitCode !== 0) throw new Error(`${c}: exit ${r.exitCode}`)
  }
  const ms = now() - t0
  await s.kill()
  return ms
}

const out = {}
const names = []
try {
  // a. create from a template with a big layer vs from base
  console.log(`== a. create from a template with a ${BIG_MB} MiB layer vs from base (${2 * N} samples each)`)
  names.push('bench-big')
  const bigBuild = await build(Template().fromTemplate('base').runCmd(`head -c ${BIG_MB}M /dev/urandom > /big && sync /big`, { user: 'root' }), 'bench-big')
  console.log(`   (the template's build: ${(bigBuild.wall / 1000).toFixed(1)} s)`)
  const base = [], big = []
  for (let i = 0; i < 2 * N; i++) {
    base.push(await createRun('base', ['true']))
    big.push(await createRun('bench-big', ['true']))
  }
  out.create = { base_ms: median(base), big_ms: median(big), ratio: median(big) / median(base), big_mb: BIG_MB }
  console.log(`   base ${f2(out.create.base_ms)} ms, template ${f2(out.create.big_ms)} ms: ${goal(out.create.ratio, 1.2)}`)

  // b. a rebuild after editing the last step vs that step alone in a sandbox
  console.log(`== b. rebuild after editing the last step vs the step alone in a sandbox (${N} samples each)`)
  names.push('bench-steps')
  const three = (last) => Template().fromTemplate('base').runCmd(work(1)).runCmd(work(2)).runCmd(last)
  await build(three(work(3, ' # 0')), 'bench-steps')
  const rebuild = [], rebuildOwn = [], alone = []
  for (let i = 1; i <= N; i++) {
    const last = work(3, ` # ${i}`)
    alone.push(await createRun('base', [last]))
    const r = await build(three(last), 'bench-steps')
    rebuild.push(r.wall)
    rebuildOwn.push(r.own)
  }
  out.rebuild = { step_ms: median(alone), rebuild_ms: median(rebuild), rebuild_own_ms: median(rebuildOwn),
    ratio: median(rebuild) / median(alone), ratio_own: median(rebuildOwn) / median(alone) }
  console.log(`   the step alone ${f2(out.rebuild.step_ms)} ms, rebuild ${f2(out.rebuild.rebuild_ms)} ms: ${goal(out.rebuild.ratio, 1.3)}; ` +
    `the build's own time ${f2(out.rebuild.rebuild_own_ms)} ms: ${f2(out.rebuild.ratio_own)}×`)

  // c. a first build vs the same commands by hand
  console.log(`== c. a first build (skipCache) vs the same commands by hand in a sandbox (${N} samples each)`)
  const first = [], firstOwn = [], hand = []
  for (let i = 0; i < N; i++) {
    hand.push(await createRun('base', [work(1), work(2), work(3)]))
    const r = await build(three(work(3)), 'bench-steps', { skipCache: true })
    first.push(r.wall)
    firstOwn.push(r.own)
  }
  out.first = { hand_ms: median(hand), build_ms: median(first), build_own_ms: median(firstOwn),
    ratio: median(first) / median(hand), ratio_own: median(firstOwn) / median(hand) }
  console.log(`   by hand ${f2(out.first.hand_ms)} ms, first build ${f2(out.first.build_ms)} ms: ${goal(out.first.ratio, 1.5)}; ` +
    `the build's own time ${f2(out.first.build_own_ms)} ms: ${f2(out.first.ratio_own)}×`)
} finally {
  for (const n of names) {
    await fetch(`${process.env.E2B_API_URL}/templates/${n}`, { method: 'DELETE', headers: { 'X-API-KEY': process.env.E2B_API_KEY } }).catch(() => {})
  }
}
console.log('RESULT ' + JSON.stringify(out))
