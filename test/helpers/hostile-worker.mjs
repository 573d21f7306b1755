// The hostile suite's worker thread: registers tsx so that it can load the TypeScript sources, then runs hostile-worker.ts.
import { register } from 'tsx/esm/api';

register();
await import('./hostile-worker.ts');
