// env.mjs -- what tests/sdk/run.sh passes the SDK tests: a variable's value,
// or an error saying to run the file through run.sh.
export function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run this file through tests/sdk/run.sh)`);
  return value;
}
