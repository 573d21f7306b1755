/**
 * `npm run size`: the minified + gzipped size of the core ESM bundle (what an app that
 * estimates and solves pulls in: estimate, fits/maxFitting, symbols and the layer builders),
 * of the CLI's own code (it imports the library's entry), and of the whole package for
 * information. Fails when the core or the CLI passes its budget.
 */
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

// 25 KB until run-time validation of every options object, quantized Linear layouts and
// conditional copies came in (0.2): 28.5 KB then. 33.1 KB with repeated blocks (their check,
// compact programs replayed in closed form) and symbolic peaks in vector form (0.3). 42.6 KB
// with the per-rank engines estimate runs (DDP, ZeroRedundancyOptimizer, FSDP2, DeepSpeed ZeRO
// with ZeRO-3's parameter coordinator: 9 KB of it), which a sync `estimate(model, { parallel })`
// cannot load on demand. 48.2 KB with pipeline ranks (the schedules, the stage cutter and the
// runner), tensor-parallel collectives in the ops and offloading, all reached by estimate. 51.9 KB
// with the options schemas of the new LLM families and the CPU convolution, pooling and norm
// kernels the vision builders follow (issues 13, 14). 56.4 KB with oneDNN's grouped and
// channels-last convolution rules (the vision catalog, read from allocator traces). 58.8 KB
// with context parallelism (the ring attention's allocations, replayed), Megatron-core's engine
// (buffer layout and shards) and expert-parallel routing, all reached by estimate (issue 12).
// 61.0 KB with transformers 4.57.6 read for every family and the CPU sdpa math path (issue 22).
// 71.6 KB with a schema per builder and op rule (keys, types, enums, ranges, sizes across fields,
// each error's words), the layer and graph-callback checks, and the argument checks of every
// export estimate reaches (sym, the tensor specs, the decoder meta): issue 23's hostile inputs.
// 81.4 KB with the caching allocator as PyTorch's (pools, splitting, releases before an OOM,
// garbage collection, expandable segments, PYTORCH_CUDA_ALLOC_CONF's parser) that bytes.reserved
// and the fit verdict replay, and the GPUs' torch capacities with their sources (issue 24).
// 84.4 KB with the rank families estimate's engines record (a ZeRO-1/2 or ZeroRedundancyOptimizer
// step standing for every rank, the ledger's per-rank blocks and their sweep) that plan reaches
// through rankPeaks (issue 25). 86.2 KB with a pipeline rank's steady 1F1B phase written once and
// counted over (the schedule's check, the reduced run, the full program built only when read), which
// estimate reaches through every pipeline rank (issue 25's wide search).
const BUDGET = 87 * 1024;
const dist = new URL('../dist/index.js', import.meta.url).pathname;

async function gzipped(exports: string): Promise<number> {
  const result = await build({
    stdin: {
      contents: exports === '*' ? `export * from ${JSON.stringify(dist)};` : `export { ${exports} } from ${JSON.stringify(dist)};`,
      resolveDir: '.',
      loader: 'js',
    },
    bundle: true,
    minify: true,
    format: 'esm',
    platform: 'neutral',
    write: false,
    logLevel: 'error',
  });
  return gzipSync(result.outputFiles[0]!.contents, { level: 9 }).length;
}

const core = await gzipped('estimate, fits, maxFitting, sym, evaluate, seq, conv2d, bn, linear, relu, hardswish, residual, branch, module');
// The CLI on top of the library: dist/cli.js imports dist/index.js, so this is its own code only.
// 24 KB until issue 20 added the grpo/sft commands from the trainers' fields, the flags generated
// from them and a strict YAML reader for --config (27.7 KB then): a second copy of the library would
// add ~60 KB, which this budget still catches. Issue 21's vllm and rl commands (vLLM's engine flags, two
// help texts, the engine and job tables) took it to 33.3 KB. 35.7 KB with the fit verdict's lines on
// every command (issue 24: --verdict, the trainers' and rl's sums) and issue 25's fit --advise table
// and plan --fewest. 39.3 KB with issue 26's config-file flags (--deepspeed: the flags as the Trainer's
// "auto" context, the contradiction checks) and explain-config (a meaning for every key the readers use);
// 45.0 KB with --training-args, --accelerate-config and vLLM's config.yaml (vllm-config.ts: every engine
// argument vLLM takes, each neutral, default-only or modelled, so that none is read silently).
// 46.7 KB with explain-config for the TRL script configs and vLLM's config.yaml (issue 26: which trainer, each
// field's origin and meaning, through the readers the estimating commands use); 47.0 KB with a YAML value
// on the lines under its key and lists of mappings (TRL's own example config and dataset mixtures) and vLLM's
// newer arguments, and the meanings of GRPO's vLLM fields (47.4 KB).
const CLI_BUDGET = 47.5 * 1024;
const cliBuild = await build({
  entryPoints: [new URL('../dist/cli.js', import.meta.url).pathname],
  bundle: false,
  minify: true,
  format: 'esm',
  platform: 'node',
  write: false,
  logLevel: 'error',
});
const cli = gzipSync(cliBuild.outputFiles[0]!.contents, { level: 9 }).length;
const full = await gzipped('*');
const kb = (n: number) => `${(n / 1024).toFixed(2)} KB`;
console.log(`core ESM bundle (minified + gzip): ${kb(core)} (budget ${kb(BUDGET)})`);
console.log(`whole package (minified + gzip): ${kb(full)} (reports, catalogs, charts included)`);
console.log(`CLI on top of it (minified + gzip): ${kb(cli)} (budget ${kb(CLI_BUDGET)})`);
if (core > BUDGET) {
  console.error('core bundle is over budget');
  process.exitCode = 1;
}
if (cli > CLI_BUDGET) {
  console.error('the CLI is over budget (does it bundle the library again?)');
  process.exitCode = 1;
}
