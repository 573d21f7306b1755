/** A worker thread running the jobs of hostile-runner.ts one at a time, its messages posted to the test. */
import { parentPort, workerData } from 'node:worker_threads';
import { type Job, runJob } from './hostile-runner.js';

// No case reaches the network: a Hub call whose fetch option is left out falls back to this stub.
globalThis.fetch = async () => new Response('not found', { status: 404 });

const progress = new Int32Array((workerData as { progress: SharedArrayBuffer }).progress);
parentPort!.on('message', (job: Job) => {
  const post = (message: unknown) => parentPort!.postMessage(message);
  // A crash of the runner itself (not of a judged call) is reported to the test, which fails the export.
  runJob(job, progress, post).catch((error: unknown) =>
    post({ type: 'crash', error: error instanceof Error ? (error.stack ?? error.message) : String(error) }),
  );
});
parentPort!.postMessage({ type: 'ready' });
