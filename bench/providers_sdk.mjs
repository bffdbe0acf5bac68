// bench/providers_sdk.mjs — the baseline side of bench/providers.sh (issue 4): the official
// e2b SDK (spec/sdk/node_modules/e2b), unmodified, against the same sandboxd in the same run.
//   node bench/providers_sdk.mjs latency N       bare sandbox.commands.run('true'), N runs
//   node bench/providers_sdk.mjs throughput B    commands.run('head -c B /dev/zero') with
//                                                onStdout counting bytes
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY. Prints a human line, then
// `RESULT {json}`. Exits non-zero when a command fails.
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { Sandbox } = await import(pathToFileURL(path.join(ROOT, 'spec/sdk/node_modules/e2b/dist/index.mjs')).href)

const [mode, argRaw] = process.argv.slice(2)
const median = (a) => {
  const s = [...a].sort((x, y) => x - y)
  const n = s.length
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2
}
const now = () => Number(process.hrtime.bigint()) / 1e6

const sbx = await Sandbox.create({ timeoutMs: 600_000 })
let rc = 0
try {
  if (mode === 'latency') {
    const n = Number(argRaw || 50)
    for (let i = 0; i < 3; i++) await sbx.commands.run('true')          // warm-up
    const t = []
    for (let i = 0; i < n; i++) {
      const t0 = now()
      const r = await sbx.commands.run('true')
      t.push(now() - t0)
      if (r.exitCode !== 0) throw new Error(`true exited with ${r.exitCode}`)
    }
    const res = { median_ms: median(t), min_ms: Math.min(...t), n }
    console.log(`  SDK commands.run('true'): median ${res.median_ms.toFixed(2)} ms over ${n} (min ${res.min_ms.toFixed(2)})`)
    console.log('RESULT ' + JSON.stringify(res))
  } else if (mode === 'throughput') {
    const bytes = Number(argRaw || 268435456)
    let got = 0
    const t0 = now(), c0 = process.cpuUsage()
    // onStdout gets decoded text; every byte here is NUL, one UTF-16 unit per byte.
    const r = await sbx.commands.run(`head -c ${bytes} /dev/zero`, {
      onStdout: (d) => { got += d.length }, timeoutMs: 600_000,
    })
    const ms = now() - t0
    if (r.exitCode !== 0) throw new Error(`generator exited with ${r.exitCode}`)
    if (got !== bytes) throw new Error(`got ${got} of ${bytes} bytes`)
    const c = process.cpuUsage(c0)
    const res = { ms, mb_s: bytes / 1048576 / (ms / 1000), client_cpu_s: (c.user + c.system) / 1e6 }
    console.log(`  SDK     onStdout ${bytes / 1048576} MiB in ${ms.toFixed(0)} ms: ${res.mb_s.toFixed(1)} MiB/s (client CPU ${res.client_cpu_s.toFixed(2)} s)`)
    console.log('RESULT ' + JSON.stringify(res))
  } else {
    throw new Error('usage: providers_sdk.mjs latency N | throughput BYTES')
  }
} catch (e) {
  console.error('providers_sdk:', e?.message ?? e)
  rc = 1
} finally {
  await sbx.kill().catch(() => {})
}
process.exit(rc)
