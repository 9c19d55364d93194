// installed.cjs [DIR] -- exits 0 when DIR/node_modules holds exactly the
// packages that DIR/package-lock.json pins, else 3 and says what differs
// (3, not 1: node itself exits 1 on an uncaught error, which must not pass
// for "not installed"). DIR is tests/sdk when not given; tests/dashboard
// uses it too. scripts/setup.sh uses it to skip `npm ci` (idempotence) and
// the tests' run.sh to skip a test without its packages.
// npm writes node_modules/.package-lock.json (its "hidden lockfile") when an
// install completes, so a partial install does not pass for a whole one.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

function read(file) {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    return null;
  }
}

const dir = process.argv[2] ? path.resolve(process.argv[2]) : __dirname;
const name = `tests/${path.basename(dir)}`; // how messages name it
const lock = read(path.join(dir, 'package-lock.json'));
const hidden = read(path.join(dir, 'node_modules', '.package-lock.json'));
if (!lock) {
  console.log(`${name}/package-lock.json cannot be read`);
  process.exit(3);
}
if (!hidden) {
  console.log(`${name}/node_modules is not installed`);
  process.exit(3);
}
for (const [where, entry] of Object.entries(lock.packages || {})) {
  if (!where.startsWith('node_modules/')) continue; // "" is this package itself
  const installed = read(path.join(dir, where, 'package.json'));
  const version = installed && installed.version;
  if (version !== entry.version || hidden.packages?.[where]?.version !== entry.version) {
    console.log(`${name}/${where} is ${version || 'missing'}, package-lock.json wants ${entry.version}`);
    process.exit(3);
  }
}
