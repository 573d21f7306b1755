import { tensor } from '../tensor/spec.js';
import type { OpRule } from './types.js';

/** Attributes of log_softmax. */
export interface LogSoftmaxAttrs {
  readonly dim?: number;
}

/** log_softmax keeps its output for backward (derivatives.yaml: _log_softmax → result). */
export const logSoftmaxOp: OpRule<LogSoftmaxAttrs> = {
  name: 'log_softmax',
  arity: 1,
  apply([input]) {
    return { outputs: [tensor(input!.shape, input!.dtype)], saves: () => [{ output: 0 }] };
  },
};

/**
 * nll_loss with mean reduction: a scalar. Keeps the target and the scalar total weight;
 * backward makes a gradient the size of the log-probabilities.
 */
export const nllLossOp: OpRule<Record<string, never>> = {
  name: 'nll_loss',
  arity: 2,
  apply([input]) {
    return {
      outputs: [tensor([], input!.dtype)],
      nonDifferentiableOutputs: [],
      saves: () => [{ input: 1 }, { extra: tensor([], input!.dtype), label: 'total_weight' }],
      backward: () => ({ inputGrads: ['new', 'none'] }),
    };
  },
};

/**
 * Old names, kept only while src/trace/, src/parallel/pipeline/stages.ts and src/catalog/llama-layer.ts
 * still import them (they are being edited elsewhere); drop once those import the *Op names.
 */
