// Scores a run of the HTTP cache test suite (cache-tests.fyi) beside the results the suite
// publishes for other caches, with the suite's own determineTestResult (which honours
// depends_on). Usage: node score.mjs SUITE_DIR RESULTS_JSON [NAME]
// SUITE_DIR is a checkout of the suite (tests/index.mjs, test-engine/lib/results.mjs,
// results/index.mjs); RESULTS_JSON is the output of its cli for the cache under test.
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const [suiteDir, resultsFile, name = 'slipstream'] = process.argv.slice(2)
if (!suiteDir || !resultsFile) {
  console.error('usage: node score.mjs SUITE_DIR RESULTS_JSON [NAME]')
  process.exit(2)
}
const load = async rel => (await import(pathToFileURL(path.resolve(suiteDir, rel)).href))
const suites = (await load('tests/index.mjs')).default
const { determineTestResult, resultTypes } = await load('test-engine/lib/results.mjs')
const published = fs.existsSync(path.join(suiteDir, 'results/index.mjs'))
  ? (await load('results/index.mjs')).default.filter(r => r.type !== 'browser')
  : []

const caches = [{ name, results: JSON.parse(fs.readFileSync(resultsFile)) }]
for (const p of published) {
  caches.push({
    name: `${p.name} ${p.version}`,
    results: JSON.parse(fs.readFileSync(path.join(suiteDir, 'results', p.file)))
  })
}

// The required checks a shared cache is scored on: kind `required` (the default), not
// browser-only. Each falls in exactly one category of determineTestResult.
const required = []
for (const suite of suites) {
  for (const t of suite.tests) {
    if ((t.kind || 'required') !== 'required' || t.browser_only === true) continue
    required.push({ group: suite.id, test: t })
  }
}
const category = new Map(Object.entries(resultTypes).map(([k, v]) => [v, k]))
const classify = (results, id) => category.get(determineTestResult(suites, id, results))
for (const c of caches) {
  c.category = new Map(required.map(({ test }) => [test.id, classify(c.results, test.id)]))
  c.passed = [...c.category.values()].filter(k => k === 'pass').length
}

const out = []
out.push(`required checks: ${required.length} (kind required, not browser-only), scored with the suite's determineTestResult`)
out.push('')
out.push('required checks passed per cache:')
for (const c of [...caches].sort((a, b) => b.passed - a.passed)) {
  out.push(`  ${String(c.passed).padStart(4)}  ${c.name}`)
}
const ours = caches[0]
const counts = {}
for (const k of ours.category.values()) counts[k] = (counts[k] || 0) + 1
out.push('')
out.push(`${name} by category: ` + Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(', '))

// Per group: the required checks passed by each cache.
const groups = [...new Set(required.map(r => r.group))]
const short = caches.map(c => c.name.split(' ')[0].slice(0, 8))
out.push('')
out.push('required checks passed per group:')
out.push('  ' + 'group'.padEnd(20) + 'total'.padStart(6) + short.map(s => s.padStart(9)).join(''))
for (const g of groups) {
  const ids = required.filter(r => r.group === g).map(r => r.test.id)
  const cells = caches.map(c => String(ids.filter(id => c.category.get(id) === 'pass').length).padStart(9))
  out.push('  ' + g.padEnd(20) + String(ids.length).padStart(6) + cells.join(''))
}

// Every required check we do not pass, what it depends on, our raw result, and how many of
// the published caches pass it.
out.push('')
out.push(`required checks ${name} does not pass (category: id [depends on] - raw result - published caches passing):`)
for (const { test } of required) {
  const k = ours.category.get(test.id)
  if (k === 'pass') continue
  const others = caches.slice(1).filter(c => c.category.get(test.id) === 'pass').map(c => c.name.split(' ')[0])
  const deps = test.depends_on ? ` [${test.depends_on.join(', ')}]` : ''
  out.push(`  ${k}: ${test.id}${deps} - ${JSON.stringify(ours.results[test.id])} - ${others.length} of ${caches.length - 1}${others.length ? ' (' + others.join(', ') + ')' : ''}`)
}
console.log(out.join('\n'))
