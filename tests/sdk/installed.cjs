// installed.cjs -- exits 0 when tests/sdk/node_modules holds exactly the
// packages that tests/sdk/package-lock.json pins, else 3 and says what
// differs (3, not 1: node itself exits 1 on an uncaught error, which must
// not pass for "not installed"). scripts/setup.sh uses it to skip `npm ci`
// (idempotence) and tests/sdk/run.sh to skip the test without the SDK.
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

const lock = read(path.join(__dirname, 'package-lock.json'));
const hidden = read(path.join(__dirname, 'node_modules', '.package-lock.json'));
if (!lock) {
  console.log('tests/sdk/package-lock.json cannot be read');
  process.exit(3);
}
if (!hidden) {
  console.log('tests/sdk/node_modules is not installed');
  process.exit(3);
}
for (const [where, entry] of Object.entries(lock.packages || {})) {
  if (!where.startsWith('node_modules/')) continue; // "" is this package itself
  const installed = read(path.join(__dirname, where, 'package.json'));
  const version = installed && installed.version;
  if (version !== entry.version || hidden.packages?.[where]?.version !== entry.version) {
    console.log(`tests/sdk/${where} is ${version || 'missing'}, package-lock.json wants ${entry.version}`);
    process.exit(3);
  }
}
