/**
 * The scaling cases of issue 11, shared by `npm run bench` (on dist/) and the budget test (on
 * src/): the same models at growing depth and with growing numbers of symbols, timed in one
 * run so that the ratios mean something on any machine.
 */
import type * as Lib from '../src/index.js';

type Library = Pick<typeof Lib, 'estimate' | 'fromHFConfig' | 'llm' | 'maxFitting' | 'mobilenetV3Small' | 'sym'>;

/** Llama-3.1-405B's config.json (the fields that shape memory), at any depth. */
const LLAMA_405B = {
  model_type: 'llama',
  torch_dtype: 'bfloat16',
  hidden_size: 16384,
  intermediate_size: 53248,
  num_hidden_layers: 126,
  num_attention_heads: 128,
  num_key_value_heads: 8,
  vocab_size: 128256,
  max_position_embeddings: 131072,
  rope_theta: 500000.0,
  rms_norm_eps: 1e-5,
} as const;

/**
 * Milliseconds of `run` after warm-up: the fastest of at least `runs` calls over at least `ms`
 * milliseconds. The minimum, not the median: a garbage collection or a timer interrupt only ever
 * adds time, and on a shared 2-core machine they come in bursts that move a median by 5×.
 */
export function timeMs(run: () => unknown, { runs = 5, ms = 200, warmup = 2 }: { runs?: number; ms?: number; warmup?: number } = {}): number {
  for (let i = 0; i < warmup; i += 1) run();
  const samples: number[] = [];
  const start = performance.now();
  while (samples.length < runs || performance.now() - start < ms) {
    const t = performance.now();
    run();
    samples.push(performance.now() - t);
    if (samples.length >= 1000) break;
  }
  return Math.min(...samples);
}

export interface Row {
  readonly group: string;
  readonly task: string;
  readonly ms: number;
  /** Against the group's first row. */
  readonly ratio: number;
}

export interface Budget {
  readonly name: string;
  readonly ratio: number;
  readonly limit: number;
}

/** Depths of the Llama-3.1-405B shape to time. */
export const DEPTHS = [1, 2, 4, 8, 16, 32, 64, 126] as const;

/**
 * Times every case and returns the table and the budgets issue 11 sets on the ratios:
 * 126 layers ≤ 3× one layer, `[B, S]` symbolic ≤ 3× concrete, maxFitting ≤ 3× one estimate.
 */
export function scaling(lib: Library, options: { runs?: number; ms?: number; depths?: readonly number[] } = {}): { rows: Row[]; budgets: Budget[] } {
  const timing = { runs: options.runs ?? 5, ms: options.ms ?? 200 };
  const rows: Row[] = [];
  const push = (group: string, task: string, ms: number) => {
    const first = rows.find((r) => r.group === group);
    rows.push({ group, task, ms, ratio: first === undefined ? 1 : ms / first.ms });
  };
  // The seed first, in a process that has run nothing else: what a user estimating a CNN meets.
  const seedModel = lib.mobilenetV3Small({ numClasses: 3 });
  push('seed', 'estimate: MobileNetV3-small 1×3×4000×2672 training step (the seed)', timeMs(() => lib.estimate(seedModel, { input: [1, 3, 4000, 2672] }), { ...timing, runs: 200 }));
  const train405 = { input: [1, 8192] as const, precision: 'bf16' as const };
  for (const layers of options.depths ?? DEPTHS) {
    const model = lib.fromHFConfig({ ...LLAMA_405B, num_hidden_layers: layers });
    push('depth', `Llama-3.1-405B shape, ${layers} layer${layers === 1 ? '' : 's'}, 1×8192 bf16 training step`, timeMs(() => lib.estimate(model, train405), timing));
  }
  const qwen = lib.llm('qwen2.5-0.5b');
  const B = lib.sym('B');
  const S = lib.sym('S');
  const inputs: [string, readonly (number | ReturnType<typeof lib.sym>)[]][] = [
    ['8×4096', [8, 4096]],
    ['[B, 4096]', [B, 4096]],
    ['[8, S]', [8, S]],
    ['[B, S]', [B, S]],
  ];
  for (const [name, input] of inputs) push('symbols', `Qwen2.5-0.5B ${name} bf16 training step`, timeMs(() => lib.estimate(qwen, { input, precision: 'bf16' }), timing));
  const big = lib.fromHFConfig(LLAMA_405B);
  push('maxFitting', 'estimate: Llama-3.1-405B 1×8192 bf16 training step', timeMs(() => lib.estimate(big, train405), timing));
  push('maxFitting', 'maxFitting: batch of Llama-3.1-405B at 8192 on 8 TiB', timeMs(() => lib.maxFitting(big, 'B', { input: [B, 8192], precision: 'bf16', gpu: '8192GB' }), timing));
  const ratio = (group: string) => rows.filter((r) => r.group === group).at(-1)!.ratio;
  const depthRows = rows.filter((r) => r.group === 'depth');
  return {
    rows,
    budgets: [
      { name: `${depthRows.at(-1)!.task.split(',')[1]!.trim()} / 1 layer`, ratio: ratio('depth'), limit: 3 },
      { name: '[B, S] symbolic / concrete', ratio: ratio('symbols'), limit: 3 },
      { name: 'maxFitting / one estimate', ratio: ratio('maxFitting'), limit: 3 },
    ],
  };
}
