/** `vram-ts korthikanti`: Korthikanti et al.'s per-layer activations next to vram-ts's count. */
import { estimate, formatBytes, formatCount, fromHFConfig, korthikanti } from '../lib.js';
import { usage } from '../errors.js';
import { DEFAULTS, type Values } from '../flags.js';
import { KORTHIKANTI_HELP } from '../help.js';
import { count } from '../values.js';
import type { Outcome, PlainCommand } from './command.js';

/** Korthikanti et al.'s formula beside vram-ts's count for one GPT-2 layer (16-bit, dropout 0.1). */
function runKorthikanti(values: Values): Outcome {
  const d = DEFAULTS.korthikanti;
  const seq = count(values, 'seq', d.seq);
  const batch = count(values, 'batch', d.batch);
  const hidden = count(values, 'hidden', d.hidden);
  const heads = count(values, 'heads', d.heads);
  if (hidden % heads !== 0) usage('--heads', `must divide --hidden ${hidden}`, { expected: 'a divisor of the hidden size', received: String(heads) });
  const paper = korthikanti({ seq, batch, hidden, heads }) as number;
  const layer = (layers: number) =>
    estimate(
      fromHFConfig(
        {
          model_type: 'gpt2',
          n_embd: hidden,
          n_head: heads,
          n_layer: layers,
          n_positions: seq,
          vocab_size: 1024,
          attn_pdrop: 0.1,
          resid_pdrop: 0.1,
          embd_pdrop: 0.1,
        },
        { attention: 'eager' },
      ),
      { input: [batch, seq], precision: 'bf16', timeline: false },
    ).bytes.activations as number;
  const ours = layer(2) - layer(1);
  const sbh = seq * batch * hidden;
  const stdout = [
    `One transformer layer, s=${seq} b=${batch} h=${hidden} a=${heads}, 16-bit activations:`,
    `  Korthikanti et al. 2022, sbh(34 + 5as/h):      ${formatCount(paper)} B (${formatBytes(paper)}) = sbh × ${(paper / sbh).toFixed(2)}`,
    `  vram-ts, Hugging Face GPT-2 layer op by op:  ${formatCount(ours)} B (${formatBytes(ours)}) = sbh × ${(ours / sbh).toFixed(2)}`,
    '',
  ].join('\n');
  return { stdout, code: 0 };
}

/** One layer's activations by the paper and by vram-ts. */
export const korthikantiCommand: PlainCommand<'korthikanti'> = {
  name: 'korthikanti',
  summary: "Korthikanti et al.'s per-layer activations next to vram-ts's op-level count for a GPT-2 layer of that shape",
  named: 'korthikanti',
  help: KORTHIKANTI_HELP,
  words: 1,
  model: false,
  run: runKorthikanti,
};
