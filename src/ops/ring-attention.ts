import { fail } from '../errors.js';
import type { Dim } from '../sym/expr.js';
import { floorDiv, mul, product } from '../sym/ops.js';
import { bytesOf, type DType } from '../tensor/dtype.js';
import { tensor } from '../tensor/spec.js';
import type { KernelStep, OpRule } from './types.js';

/*
 * Context parallelism's attention as PyTorch runs it (torch 2.13,
 * torch/distributed/tensor/experimental/_context_parallel/_attention.py): each rank holds s/c
 * positions of q, k and v; `_templated_ring_attention` all-gathers k and v once (the default
 * `_RotateMethod.ALL_GATHER`) and runs the SDPA kernel against each rank's chunk in turn,
 * merging the partial outputs in float32 (`_SDPAMerger`, `convert_to_f32=True`);
 * `_templated_ring_attention_backward` re-gathers k and v, accumulates dq, dk, dv in float32
 * and passes the dk/dv accumulator round the ring (`_AllToAllRotater`). Nothing inside runs
 * under autograd (it is below DTensor's dispatch): what autograd saves is the op's local
 * q, k, v, output and log-sum-exp, as for one device. The transients below are the Python
 * locals of those two functions, replayed by reference count in source order.
 */

/** Attributes of {@link ringSdpaOp}. */
export interface RingAttentionAttrs {
  /** Ranks in the context-parallel group (c). */
  readonly size: number;
  /** This rank (0 … c − 1): which chunks it computes against, with load balancing which halves. */
  readonly rank: number;
  /** `_cp_options.enable_load_balance` (default true: round-robin halves, every step computes). */
  readonly loadBalance?: boolean;
  /** k and v as passed: contiguous (a repeat_kv copy, a rotary result) or views the ring copies first. */
  readonly keyContiguous: boolean;
  readonly valueContiguous: boolean;
}

/**
 * A Python frame's tensors by reference count, recording the allocations and frees a replay of
 * the source needs: names hold buffers (a view holds its base), temporaries live for one
 * expression.
 */
interface Frame {
  readonly steps: KernelStep[];
  /** `name = <new tensor of bytes>` (0 bytes: the name holds nothing new). */
  set(name: string, label: string, bytes: Dim): void;
  /** `name = <a view of, or the same tensor as, what other holds>`. */
  alias(name: string, other: string): void;
  /** `name = None` (or the frame returns). */
  clear(name: string): void;
  /** `name = <a temporary>`: the name takes the temporary's reference over. */
  adopt(name: string, buffer: string | null): void;
  /** A temporary of one expression; `drop` it when the expression is done. */
  temp(label: string, bytes: Dim): string | null;
  drop(buffer: string | null): void;
  /** The buffer a name holds (for returning it). */
  get(name: string): string | null;
  /** A returned buffer: its bytes leave the frame now (the op's results count them), whoever holds it. */
  release(buffer: string | null): void;
}

function frame(): Frame {
  const steps: KernelStep[] = [];
  const refs = new Map<string, number>();
  const names = new Map<string, string | null>();
  const released = new Set<string>();
  let n = 0;
  const retain = (b: string | null) => {
    if (b !== null) refs.set(b, (refs.get(b) ?? 0) + 1);
  };
  const drop = (b: string | null) => {
    if (b === null) return;
    const left = (refs.get(b) ?? 0) - 1;
    refs.set(b, left);
    if (left === 0 && !released.has(b)) steps.push({ free: b });
  };
  const temp = (label: string, bytes: Dim): string | null => {
    if (bytes === 0) return null;
    const b = `${label} #${n++}`;
    refs.set(b, 1);
    steps.push({ alloc: b, bytes });
    return b;
  };
  const bind = (name: string, buffer: string | null) => {
    retain(buffer);
    drop(names.get(name) ?? null);
    names.set(name, buffer);
  };
  return {
    steps,
    temp,
    drop,
    get: (name) => names.get(name) ?? null,
    set(name, label, bytes) {
      const b = temp(label, bytes);
      bind(name, b);
      drop(b);
    },
    alias(name, other) {
      bind(name, names.get(other) ?? null);
    },
    clear(name) {
      bind(name, null);
    },
    adopt(name, buffer) {
      bind(name, buffer);
      drop(buffer);
    },
    release(buffer) {
      if (buffer === null || released.has(buffer)) return;
      released.add(buffer);
      steps.push({ free: buffer });
    },
  };
}

/** Sizes the ring works with, in bytes: the local q, one of k/v, the output, the log-sum-exp (float32), and their halves. */
interface RingSizes {
  readonly q: Dim;
  readonly kv: Dim;
  readonly out: Dim;
  readonly lse: Dim;
  readonly halfQ: Dim;
  readonly halfKv: Dim;
  readonly halfOut: Dim;
  readonly halfLse: Dim;
  /** Bytes per element of q (the model's compute dtype). */
  readonly width: number;
}

/** What `_is_causal_behavior` decides for step i: compute causally, compute all, or skip. */
function behaviour(rank: number, size: number, i: number, loadBalance: boolean): 'causal' | 'full' | 'skip' {
  if (i === 0) return 'causal';
  const source = (((rank - i) % size) + size) % size;
  return source < rank || loadBalance ? 'full' : 'skip';
}

/** The float32 bytes of a tensor of `bytes` at `width` bytes per element. */
const f32 = (bytes: Dim, width: number): Dim => (width === 4 ? bytes : mul(floorDiv(bytes, width), 4));

/** Names a frame binds that the function's return lets go of. */
const FORWARD_LOCALS = ['result', 'self._out', 'self._lse', 'out', 'logsumexp', 'key', 'value', 'next_kv', 'rotater'];
const BACKWARD_LOCALS = [
  'grad_query',
  'dkv_rotater',
  'grad_key',
  'grad_value',
  'next_grad_kv',
  'grad_query_',
  'grad_key_',
  'grad_value_',
  'lse',
  'key',
  'value',
  'kv_rotater',
  'next_kv',
];

/**
 * The forward's allocations (`_templated_ring_attention`, `_SDPAMerger`, `_AllGatherRotater`).
 * On CPU `log_sigmoid` allocates a buffer of its input's size (none on CUDA). The
 * merged output and log-sum-exp are the op's results: released as the results step makes them.
 */
function forwardSteps(a: RingAttentionAttrs, s: RingSizes, cpu: boolean): KernelStep[] {
  const f = frame();
  const lb = a.loadBalance ?? true;
  const c = a.size;
  // key = key.contiguous(); value = value.contiguous() (the caller keeps the originals).
  if (!a.keyContiguous) f.set('key', 'key.contiguous()', s.kv);
  if (!a.valueContiguous) f.set('value', 'value.contiguous()', s.kv);
  let merged = false;
  let firstMerge = true;
  for (let i = 0; i < c; i += 1) {
    if (i > 0) {
      // next_kv = rotater.next_buffer(); key, value = views of its chunk.
      f.alias('next_kv', 'rotater');
      f.alias('key', 'rotater');
      f.alias('value', 'rotater');
    }
    if (i < c - 1) {
      // next_kv = torch.cat([key.flatten(), value.flatten()]); the rotater all-gathers it once.
      f.set('next_kv', 'cat(k, v)', mul(s.kv, 2));
      if (f.get('rotater') === null) f.set('rotater', 'all-gathered k, v', mul(s.kv, 2 * c));
      // `next_kv = rotater.exchange_buffers(next_kv)` returns None.
      f.clear('next_kv');
    }
    if (behaviour(a.rank, c, i, lb) === 'skip') continue;
    const partial = i > 0 && lb && i > a.rank;
    const outBytes = partial ? s.halfOut : s.out;
    const lseBytes = partial ? s.halfLse : s.lse;
    const outF32 = f32(outBytes, s.width);
    // out, logsumexp, *rest = op(q, k, v, ...): both made before the names let go of the last step's.
    const kernelOut = f.temp('chunk out', outBytes);
    const kernelLse = f.temp('chunk logsumexp', lseBytes);
    f.adopt('out', kernelOut);
    f.adopt('logsumexp', kernelLse);
    // sdpa_merger.step: `.to(torch.float32)` (a copy unless already float32).
    if (s.width === 4) f.alias('block_out', 'out');
    else f.set('block_out', 'out.to(float32)', outF32);
    f.alias('block_lse', 'logsumexp');
    if (!merged) {
      merged = true;
      f.alias('self._out', 'block_out');
      f.alias('self._lse', 'block_lse');
    } else {
      mergeOne(f, s, { lseBytes, outF32, partial, cpu, firstMerge });
      firstMerge = false;
    }
    // step() returns: its float32 copy goes unless the merger keeps it.
    f.clear('block_out');
    f.clear('block_lse');
  }
  forwardResults(f, s);
  return f.steps;
}

/** One later step's merge (`_SDPAMerger._merge_one`): the float32 out and log-sum-exp updated out of place. */
function mergeOne(f: Frame, s: RingSizes, m: { lseBytes: Dim; outF32: Dim; partial: boolean; cpu: boolean; firstMerge: boolean }): void {
  const { lseBytes, outF32 } = m;
  // out = out - sigmoid(block_lse - lse) * (out - block_out)
  const d1 = f.temp('block_lse - lse', lseBytes);
  const sig = f.temp('sigmoid', lseBytes);
  f.drop(d1);
  const diff = f.temp('out - block_out', outF32);
  const prod = f.temp('sigmoid * diff', outF32);
  f.drop(sig);
  f.drop(diff);
  f.set('merge.out', 'merged out', outF32);
  f.drop(prod);
  // lse = lse - logsigmoid(lse - block_lse)
  const d2 = f.temp('lse - block_lse', lseBytes);
  const ls = f.temp('logsigmoid', lseBytes);
  // CPU: log_sigmoid_forward makes a buffer besides its result, and at the first merge one
  // more tensor of its input's size (measured: while the merged log-sum-exp is still the
  // CPU kernel's own, presumably a contiguous copy of a differently laid out input).
  if (m.cpu) {
    const copy = m.firstMerge ? f.temp('log_sigmoid input .contiguous()', lseBytes) : null;
    f.drop(f.temp('log_sigmoid buffer', lseBytes));
    f.drop(copy);
  }
  f.drop(d2);
  f.set('merge.lse', 'merged logsumexp', lseBytes);
  f.drop(ls);
  if (m.partial) {
    // _partial_update: torch.cat of the chunks with the second half replaced.
    f.set('self._lse', 'partial update lse', s.lse);
    f.set('self._out', 'partial update out', f32(s.out, s.width));
  } else {
    f.alias('self._lse', 'merge.lse');
    f.alias('self._out', 'merge.out');
  }
  f.clear('merge.out');
  f.clear('merge.lse');
}

/**
 * results(): out = self._out.to(dtype) (a copy unless float32: the float32 merge lives while it
 * is made); lse = self._lse.squeeze(-1) (a view). The returned buffers leave the frame as the
 * results step makes the op's output and log-sum-exp.
 */
function forwardResults(f: Frame, s: RingSizes): void {
  if (s.width !== 4) {
    f.set('result', 'merged out .to(dtype)', s.out);
    f.release(f.get('result'));
  } else f.release(f.get('self._out'));
  f.release(f.get('self._lse'));
  f.steps.push({ results: 'outputs' });
  for (const name of FORWARD_LOCALS) f.clear(name);
}

/** The backward's allocations (`_templated_ring_attention_backward`); dq, dk and dv are the results. */
function backwardSteps(a: RingAttentionAttrs, s: RingSizes): KernelStep[] {
  const f = frame();
  const lb = a.loadBalance ?? true;
  const c = a.size;
  const q32 = f32(s.q, s.width);
  const kv32 = f32(s.kv, s.width);
  // grad_query, grad_key, grad_value = torch.zeros_like(..., dtype=float32)
  f.set('grad_query', 'grad_query (float32)', q32);
  f.set('grad_key', 'grad_key (float32)', kv32);
  f.set('grad_value', 'grad_value (float32)', kv32);
  if (!a.keyContiguous) f.set('key', 'key.contiguous()', s.kv);
  if (!a.valueContiguous) f.set('value', 'value.contiguous()', s.kv);
  for (let i = 0; i < c; i += 1) {
    if (i > 0) {
      f.alias('key', 'kv_rotater');
      f.alias('value', 'kv_rotater');
    }
    if (i !== c - 1) {
      // next_kv = torch.cat(...) stays bound until the next step's; the rotater gathers once.
      f.set('next_kv', 'cat(k, v)', mul(s.kv, 2));
      if (f.get('kv_rotater') === null) f.set('kv_rotater', 'all-gathered k, v', mul(s.kv, 2 * c));
    }
    const partial = i > 0 && lb && i > a.rank;
    const computed = behaviour(a.rank, c, i, lb) !== 'skip';
    // Load balancing: below the diagonal (i <= rank) only the first half of k/v takes part.
    const halfKv = i > 0 && lb && i <= a.rank;
    chunkGrads(f, s, { computed, partial, halfKv, q32, kv32 });
    // `accumulator += x` with x in the compute dtype: a float32 copy of x for the add's duration.
    const promote = (bytes: Dim) => {
      if (computed && s.width !== 4) f.drop(f.temp('add_ float32 copy', bytes));
    };
    if (i > 0) {
      // grad_key, grad_value = views of the gradient buffer the previous rank sent.
      f.alias('next_grad_kv', 'dkv_rotater');
      f.alias('grad_key', 'dkv_rotater');
      f.alias('grad_value', 'dkv_rotater');
    }
    if (halfKv) {
      // _partial_update(..., add=True): the first half added in place, then torch.cat.
      promote(floorDiv(kv32, 2));
      f.set('grad_key', 'partial update grad_key', kv32);
      promote(floorDiv(kv32, 2));
      f.set('grad_value', 'partial update grad_value', kv32);
    } else {
      promote(kv32);
      promote(kv32);
    }
    // next_grad_kv = torch.cat([grad_key.flatten(), grad_value.flatten()]); permute_tensor sends it.
    // At step 0 the accumulators are zeros_like(key/value), strided like them: flatten() copies views.
    const flatKey = i === 0 && !a.keyContiguous ? f.temp('grad_key.flatten()', kv32) : null;
    const flatValue = i === 0 && !a.valueContiguous ? f.temp('grad_value.flatten()', kv32) : null;
    f.set('next_grad_kv', 'cat(dk, dv)', mul(kv32, 2));
    f.drop(flatKey);
    f.drop(flatValue);
    f.set('dkv_rotater', 'permute_tensor(dk, dv)', mul(kv32, 2));
    if (partial) {
      promote(floorDiv(q32, 2));
      f.set('grad_query', 'partial update grad_query', q32);
    } else promote(q32);
  }
  backwardResults(f, s);
  return f.steps;
}

/** One step's kernel gradients (`grad_query_, grad_key_, grad_value_ = op(...)`), or zeros for a skipped chunk. */
function chunkGrads(f: Frame, s: RingSizes, c: { computed: boolean; partial: boolean; halfKv: boolean; q32: Dim; kv32: Dim }): void {
  if (c.computed) {
    // The second half of q: its log-sum-exp chunk made contiguous (a tuple element until the next step).
    const lse = c.partial ? f.temp('logsumexp half .contiguous()', s.halfLse) : null;
    // grad_query_, grad_key_, grad_value_ = op(...): the kernel's gradients in the compute dtype.
    const dq = f.temp('chunk dq', c.partial ? s.halfQ : s.q);
    const dk = f.temp('chunk dk', c.halfKv ? s.halfKv : s.kv);
    const dv = f.temp('chunk dv', c.halfKv ? s.halfKv : s.kv);
    f.adopt('lse', lse);
    f.adopt('grad_query_', dq);
    f.adopt('grad_key_', dk);
    f.adopt('grad_value_', dv);
  } else {
    f.set('grad_query_', 'zeros dq', c.q32);
    f.set('grad_key_', 'zeros dk', c.kv32);
    f.set('grad_value_', 'zeros dv', c.kv32);
  }
}

/**
 * grad_query.to(dtype); next_grad_kv = dkv_rotater.next_buffer().to(dtype): copies (the
 * float32 query accumulator freed as its copy replaces it) or, in float32, the accumulators
 * themselves; released as the results step makes dq, dk and dv.
 */
function backwardResults(f: Frame, s: RingSizes): void {
  if (s.width !== 4) {
    f.set('grad_query', 'grad_query.to(dtype)', s.q);
    f.set('next_grad_kv', 'dk, dv .to(dtype)', mul(s.kv, 2));
    f.release(f.get('grad_query'));
    f.release(f.get('next_grad_kv'));
  } else {
    f.release(f.get('grad_query'));
    f.release(f.get('dkv_rotater'));
  }
  f.steps.push({ results: 'inputGrads' });
  for (const name of BACKWARD_LOCALS) f.clear(name);
}

/**
 * scaled_dot_product_attention under PyTorch's context parallelism (`context_parallel`, the
 * default all-gather rotation): one rank's q, k, v hold s/c positions; the kernel runs against
 * every rank's k/v chunk and the partial results merge in float32. Saves what the fused kernel
 * saves on one device (q, k, v, output, float32 log-sum-exp, all local); the all-gathered k/v,
 * the merge's float32 buffers and the backward's float32 accumulators and rotation buffers are
 * kernel transients.
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { ringSdpaOp } from 'vram-ts/internals';
 * const q = tensor([1, 4, 16, 8], 'float32');
 * const r = ringSdpaOp.apply([q, q, q], { size: 2, rank: 0, keyContiguous: true, valueContiguous: false }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'float32', path: [] });
 * console.log(r.outputs[0]!.shape, r.forwardSteps!.find((s) => 'alloc' in s && s.alloc.startsWith('all-gathered'))); // [ 1, 4, 16, 8 ] { alloc: 'all-gathered k, v #2', bytes: 8192 }
 * ```
 */
export const ringSdpaOp: OpRule<RingAttentionAttrs> = {
  name: 'ring_attention',
  arity: 3,
  apply([q, k, v], attrs, ctx) {
    if (ctx.framework === 'torch-1.13')
      fail('unsupported-op', 'context parallelism needs PyTorch 2', { path: ctx.path, expected: "framework 'torch-2'", received: ctx.framework });
    if (!Number.isSafeInteger(attrs.size) || attrs.size < 2)
      fail('bad-option', 'a context-parallel group has at least 2 ranks', {
        path: [...ctx.path, 'size'],
        expected: 'integer >= 2',
        received: String(attrs.size),
      });
    if (!Number.isSafeInteger(attrs.rank) || attrs.rank < 0 || attrs.rank >= attrs.size)
      fail('bad-option', 'the context-parallel rank must be below the size', {
        path: [...ctx.path, 'rank'],
        expected: `0 .. ${attrs.size - 1}`,
        received: String(attrs.rank),
      });
    const [b, h, s] = q!.shape as [Dim, Dim, Dim];
    const out = tensor([...q!.shape.slice(0, -1), v!.shape[v!.shape.length - 1]!], q!.dtype);
    const width = bytesOf(1, q!.dtype);
    if (typeof width !== 'number') fail('bad-option', 'ring attention needs a whole-byte dtype', { path: ctx.path, received: q!.dtype });
    const lseElems = product([b, h, s]);
    const sizes: RingSizes = {
      q: bytesOf(product(q!.shape), q!.dtype),
      kv: bytesOf(product(k!.shape), k!.dtype),
      out: bytesOf(product(out.shape), out.dtype),
      lse: bytesOf(lseElems, 'float32'),
      halfQ: floorDiv(bytesOf(product(q!.shape), q!.dtype), 2),
      halfKv: floorDiv(bytesOf(product(k!.shape), k!.dtype), 2),
      halfOut: floorDiv(bytesOf(product(out.shape), out.dtype), 2),
      halfLse: floorDiv(bytesOf(lseElems, 'float32'), 2),
      width,
    };
    return {
      outputs: [out],
      forwardSteps: forwardSteps(attrs, sizes, ctx.device === 'cpu'),
      saves: () => [{ input: 0 }, { input: 1 }, { input: 2 }, { output: 0 }, { extra: tensor([b, h, s], 'float32' as DType), label: 'logsumexp' }],
      backward: () => ({ steps: backwardSteps(attrs, sizes) }),
      macs: () => mul(product(q!.shape), mul(mul(k!.shape[2]!, attrs.size), 2)),
    };
  },
};

/** Attributes of {@link contextShardOp}. */
export interface ContextShardAttrs {
  readonly size: number;
  /** Load balancing: the sequence is cut in 2c pieces, rank r keeping pieces r and 2c − 1 − r. */
  readonly loadBalance?: boolean;
}

/**
 * The local positions of a context-parallel rank: `context_parallel(mesh, buffers=[input_ids,
 * labels, position_ids], buffer_seq_dims=[1, 1, 1])` cuts each buffer along the sequence (with
 * load balancing into 2c pieces, rank r keeping r and 2c − 1 − r) and writes the rank's shard
 * into the buffer in place (`resize_` to fewer elements keeps the storage): the output shares
 * the input's storage. The sequence must divide by c (2c with load balancing); a symbolic one
 * is taken as such a multiple (the local length is ⌊S/c⌋, 2·⌊S/2c⌋ with load balancing).
 *
 * @example
 * ```ts
 * import { tensor } from 'vram-ts';
 * import { contextShardOp } from 'vram-ts/internals';
 * const r = contextShardOp.apply([tensor([2, 4096], 'int64')], { size: 4 }, { training: true, gradEnabled: true, device: 'cuda', framework: 'torch-2', paramDtype: 'bfloat16', path: [] });
 * console.log(r.outputs[0]!.shape, r.alias); // [ 2, 1024 ] view
 * ```
 */
export const contextShardOp: OpRule<ContextShardAttrs> = {
  name: 'context_parallel_shard',
  arity: 1,
  apply([ids], attrs, _ctx) {
    const [b, s] = ids!.shape as [Dim, Dim];
    const pieces = (attrs.loadBalance ?? true) ? 2 * attrs.size : attrs.size;
    if (typeof s === 'number' && s % pieces !== 0) {
      fail(
        'bad-option',
        `context parallelism cuts the sequence into ${pieces} equal pieces${pieces > attrs.size ? ' (load balancing: 2 per rank)' : ''}: the sequence length must divide by ${pieces}`,
        { path: ['input', 1], expected: `a multiple of ${pieces}`, received: String(s) },
      );
    }
    const local = mul(floorDiv(s, pieces), pieces / attrs.size);
    return { outputs: [tensor([b, local, ...ids!.shape.slice(2)], ids!.dtype)], alias: 'view', saves: () => [], nonDifferentiableOutputs: [0] };
  },
};
