#!/usr/bin/env node
import { runAsync, stdoutFailure } from './main.js';

// A reader that goes away (`vram-ts … | head -1`) ends the command quietly, with the exit code
// it already has; writes are synchronous on pipes and files, so run() has returned by then.
process.stdout.on('error', (error) => {
  const { exitCode, line } = stdoutFailure(error, typeof process.exitCode === 'number' ? process.exitCode : 0);
  if (line !== undefined) process.stderr.write(line);
  process.exit(exitCode);
});

// A closed stderr leaves nowhere to report anything: keep the exit code and stop quietly.
process.stderr.on('error', () => {});

try {
  // A Hub model (<org>/<name>) is read first; everything else runs synchronously as before.
  process.exitCode = await runAsync(
    process.argv.slice(2),
    (text) => void process.stdout.write(text),
    (text) => void process.stderr.write(text),
  );
} catch (error) {
  // Only with VRAM_TS_DEBUG set: the stack of an internal error, and still exit 2.
  process.stderr.write(`${error instanceof Error && error.stack !== undefined ? error.stack : String(error)}\n`);
  process.exitCode = 2;
}
