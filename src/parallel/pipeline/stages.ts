import { fail } from '../../errors.js';
import { graph } from '../../nn/graph.js';
import type { GraphBuilder, Layer, SeqLayer, TensorRef } from '../../nn/types.js';
import { castOp } from '../../ops/cast.js';
import { viewOp } from '../../ops/view.js';
import type { Dim } from '../../sym/expr.js';
import { mul } from '../../sym/ops.js';
import type { TensorSpec } from '../../tensor/spec.js';

/** How a model is cut into pipeline stages, and which of them one rank runs. */
export interface PipelineCut {
  /** Pipeline ranks. */
  readonly pp: number;
  /** Stages per rank (interleaved schedules; 1 otherwise): the model is cut into pp·v stages. */
  readonly virtualStages: number;
  /** The pipeline rank (it runs stages rank, rank + pp, …). */
  readonly rank: number;
  /** Where stages 1 .. pp·v − 1 begin: a top-level child's name each (default: an even cut, earlier stages taking one more). */
  readonly splits?: readonly string[];
}

/** One stage of a rank's model. */
export interface RankStage {
  readonly stage: number;
  /** The module key the stage's ops run under in the rank's trace ('' when the rank runs one stage: the trace is the stage). */
  readonly key: string;
  readonly first: boolean;
  readonly final: boolean;
}

/** What a pipeline rank traces: its stages side by side, with the inputs each receives. */
export interface PipelineRankModel {
  readonly model: Layer;
  readonly inputs: readonly TensorSpec[];
  /** Per input: a received activation (it needs a gradient) or data. */
  readonly inputRequiresGrad: readonly boolean[];
  readonly stages: readonly RankStage[];
  /** Whether the rank runs the final stage (its trace ends with the loss). */
  readonly final: boolean;
}

/** What a model offers to be cut: its cut points, each stage as a layer, and its loss input. */
interface Stageable {
  /** The names stages may begin at (top-level children, or decoder blocks). */
  readonly names: readonly string[];
  readonly layer: (start: number, end: number, name?: string) => Layer;
  /** The input of a stage beginning at cut point `start` (not the first). */
  readonly received: (start: number) => TensorSpec;
  /** Whether a stage runs under its own module even alone (a decoder's loss input is made outside it). */
  readonly wrapped: boolean;
  /** What the loss function reads from the final stage's output. */
  readonly lossInput: (g: GraphBuilder, out: TensorRef) => TensorRef;
}

/**
 * Cuts a model into pipeline stages as a user hands them to
 * `torch.distributed.pipelining.PipelineStage`, and builds what one rank traces: its stage
 * alone, or with interleaved schedules its stages side by side (each under `stage{s}`, the
 * final stage traced last so that the loss follows it). An `nn.Sequential` is cut between
 * children (slices keep their names, `model[a:b]`), its output going to the loss; a decoder
 * with a stage builder ({@link vram-ts!RepeatedBlocks.stage}) between blocks, torchtitan's way, its
 * logits flattened and upcast for `F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))`.
 * `boundary(name)` is the spec of the input of the child or block named so (read off a trace
 * of the whole model).
 *
 * @example
 * ```ts
 * import { linear, relu, seq, tensor } from 'vram-ts';
 * import { pipelineRankModel } from 'vram-ts/internals';
 * const model = seq(linear({ out: 8 }), relu(), linear({ out: 8 }), relu());
 * const rank = pipelineRankModel(model, [tensor([2, 8])], { pp: 2, virtualStages: 1, rank: 1 }, () => tensor([2, 8]));
 * console.log(rank.stages, rank.inputRequiresGrad); // [ { stage: 1, key: '', first: false, final: true } ] [ true ]
 * ```
 */
export function pipelineRankModel(model: Layer, input: readonly TensorSpec[], cut: PipelineCut, boundary: (name: string) => TensorSpec): PipelineRankModel {
  const cutInto = stageable(model, boundary);
  const count = cut.pp * cut.virtualStages;
  const starts = stageStarts(cutInto.names, count, cut.splits);
  const stageLayer = (s: number, name?: string) => cutInto.layer(starts[s]!, starts[s + 1]!, name);
  const held = Array.from({ length: cut.virtualStages }, (_, c) => c * cut.pp + cut.rank);
  const final = held.includes(count - 1);
  const inputOf = (s: number) => (s === 0 ? input : [cutInto.received(starts[s]!)]);
  if (held.length === 1 && !cutInto.wrapped) {
    const s = held[0]!;
    return {
      model: stageLayer(s),
      inputs: inputOf(s),
      inputRequiresGrad: inputOf(s).map(() => s > 0),
      stages: [{ stage: s, key: '', first: s === 0, final }],
      final,
    };
  }
  // The final stage first among the outputs (the trace's loss follows outputs[0]), its ops last.
  const traced = [...held.filter((s) => s !== count - 1), ...(final ? [count - 1] : [])];
  const order = final ? [count - 1, ...held.filter((s) => s !== count - 1)] : held;
  const body = graph((g, refs) => {
    const outs = new Map<number, TensorRef>();
    let at = 0;
    for (const s of traced) {
      const n = inputOf(s).length;
      const out = g.apply(stageLayer(s, `stage${s}`), ...refs.slice(at, at + n));
      outs.set(s, s === count - 1 ? cutInto.lossInput(g, out) : out);
      at += n;
    }
    return order.map((s) => outs.get(s)!);
  });
  const className = 'className' in model ? model.className : 'Model';
  return {
    // Named for the model and the stages it holds (the trace's root module).
    model: { kind: 'module', className: `${className ?? 'Model'} (pipeline stage${traced.length > 1 ? 's' : ''} ${order.join(', ')})`, body },
    inputs: traced.flatMap(inputOf),
    inputRequiresGrad: traced.flatMap((s) => inputOf(s).map(() => s > 0)),
    stages: traced.map((s) => ({ stage: s, key: `stage${s}`, first: s === 0, final: s === count - 1 })),
    final,
  };
}

function stageable(model: Layer, boundary: (name: string) => TensorSpec): Stageable {
  if (model.kind === 'seq') {
    const names = model.children.map((child, i) => child.name ?? String(i));
    return {
      names,
      layer: (start, end, name) => {
        const children = model.children.slice(start, end).map((child, k) => (child.name !== undefined ? child : { ...child, name: String(start + k) }));
        const slice: SeqLayer = {
          kind: 'seq',
          className: model.className,
          isSequential: model.isSequential,
          children,
          ...(name !== undefined ? { name } : {}),
        };
        return slice;
      },
      received: (start) => boundary(names[start]!),
      wrapped: false,
      lossInput: (_g, out) => out,
    };
  }
  const blocks = model.kind === 'module' ? model.repeated : undefined;
  if (blocks?.stage === undefined)
    return fail('not-modelled', 'pipeline stages are cut from an nn.Sequential model or a catalog decoder (Llama, Qwen2, Mistral) so far', {
      path: ['parallel', 'pp'],
      expected: 'a seq model or a decoder',
      received: model.kind === 'module' ? model.className : model.kind,
    });
  return {
    names: Array.from({ length: blocks.count }, (_, i) => `${blocks.prefix}${i}`),
    layer: (start, end, name) => ({ ...blocks.stage!(start, end), ...(name !== undefined ? { name } : {}) }),
    // Every block takes hidden states of one shape.
    received: () => boundary(`${blocks.prefix}0`),
    wrapped: true,
    lossInput: (g, logits) => {
      const [batch, seq, vocab] = logits.shape as [Dim, Dim, Dim];
      const flat = g.call(viewOp, [logits], { shape: [mul(batch, seq), vocab] })[0]!;
      return flat.dtype === 'float32' ? flat : g.call(castOp, [flat], { dtype: 'float32' })[0]!;
    },
  };
}

/** Each stage's first child (and the end): the named split points, or an even cut. */
function stageStarts(names: readonly string[], count: number, splits: readonly string[] | undefined): number[] {
  if (splits !== undefined) {
    if (splits.length !== count - 1)
      fail('bad-option', `${count} stages need ${count - 1} split points`, {
        path: ['parallel', 'splits'],
        expected: `${count - 1} child names`,
        received: String(splits.length),
      });
    const starts = splits.map((name, i) => {
      const at = names.indexOf(name);
      if (at < 0)
        fail('bad-option', `no top-level child named ${JSON.stringify(name)}`, {
          path: ['parallel', 'splits', i],
          expected: names.join(' | '),
          received: name,
        });
      return at;
    });
    starts.forEach((at, i) => {
      if (at <= (i === 0 ? 0 : starts[i - 1]!))
        fail('bad-option', 'split points must follow the model, each after the last, none at the first child', {
          path: ['parallel', 'splits', i],
          received: splits[i]!,
        });
    });
    return [0, ...starts, names.length];
  }
  if (names.length < count)
    fail('bad-option', `${count} pipeline stages need at least ${count} top-level children; the model has ${names.length}`, {
      path: ['parallel', 'pp'],
      expected: `at most ${names.length} stages`,
      received: String(count),
    });
  const base = Math.floor(names.length / count);
  const extra = names.length % count;
  const starts = [0];
  for (let s = 0; s < count; s += 1) starts.push(starts[s]! + base + (s < extra ? 1 : 0));
  return starts;
}
