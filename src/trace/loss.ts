import { fail } from '../errors.js';
import type { TensorRef } from '../nn/types.js';
import { logSoftmaxOp, nllLossOp } from '../ops/loss.js';
import { formatDim } from '../sym/format.js';
import { specBytes, tensor } from '../tensor/spec.js';
import { runOp } from './run-op.js';
import { newStorage, newTensor, ref, type State } from './state.js';

/** Appends the training loss (log_softmax + nll_loss, what F.cross_entropy runs) after the model. */
export function addLoss(state: State, outputs: readonly TensorRef[]): { loss: number; target: number } | null {
  const { options } = state;
  const out = outputs[0];
  if (!options.gradEnabled || (options.loss ?? 'none') === 'none' || out === undefined || out.shape.length === 0) return null;
  if (out.shape.length < 2)
    fail('bad-loss', 'cross_entropy needs an output of at least [batch, classes]', { path: ['loss'], received: `[${out.shape.map(formatDim).join(', ')}]` });
  const targetSpec = tensor([out.shape[0]!, ...out.shape.slice(2)], 'int64');
  const targetStorage = newStorage(state, specBytes(targetSpec), 'int64', 'input');
  const target = newTensor(state, targetSpec, targetStorage, 'input', null, false, 'target', undefined);
  state.stage = 'loss';
  state.stack.push(0);
  const logp = runOp(state, logSoftmaxOp, { dim: 1 }, [out]);
  const loss = runOp(state, nllLossOp, {}, [logp[0]!, ref(state, target)]);
  state.stack.pop();
  return { loss: loss[0]!.id, target };
}
