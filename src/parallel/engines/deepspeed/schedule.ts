import type { IR } from '../../../trace/ir.js';

/** A module hook event of the schedule (`forward`: a forward hook run by a checkpoint's recompute in backward). */
export interface HookEvent {
  readonly kind: 'pre' | 'post';
  readonly module: number;
  readonly forward?: boolean;
}

/** ZeRO-3's hooks by op: forward events before op i (`forward[i]`, the last after the last op), backward events by op (-1: after the last node), and the fetch order. */
export interface HookSchedule {
  readonly forward: HookEvent[][];
  readonly backward: Map<number, HookEvent[]>;
  readonly trace: number[];
}

/**
 * ZeRO-3's hook schedule over the trace: forward pre/post hooks around each op (in call order), the
 * backward's module entries and exits, checkpoint recomputes, and the fetch order (the trace the
 * coordinator records, ppc:222-240). A module is entered in backward at its first backward op (the
 * pre-backward Function on its outputs, po:436-470, outer modules first) and left after its last
 * (the post-backward Function on its inputs, po:477-506, inner first), which fires only when every
 * input needing a gradient got one through the module. A checkpointed block reruns its forward
 * (forward hooks included) after the modules around it entered and before those inside it do.
 * `runs`: which backward nodes run (backwardRuns).
 */
export function schedule(ir: IR, runs: Uint8Array): HookSchedule {
  const forward = forwardHooks(ir);
  const flatForward = forward.flat();
  const fires = postBackwardFires(ir, runs);
  const backward = new Map<number, HookEvent[]>();
  const trace: number[] = flatForward.filter((e) => e.kind === 'pre').map((e) => e.module);
  const entered = new Set<number>();
  let open: number[] = [];
  const recomputed = new Set<number>();
  const leave = (events: HookEvent[], keep: ReadonlySet<number>) => {
    const leaving = open.filter((m) => !keep.has(m)).sort((a, b) => ir.modules[a]!.finishOrder - ir.modules[b]!.finishOrder);
    open = open.filter((m) => keep.has(m));
    for (const m of leaving) if (fires[m]) events.push({ kind: 'post', module: m });
  };
  for (let i = ir.ops.length - 1; i >= 0; i -= 1) {
    if (runs[i] !== 1) continue;
    const op = ir.ops[i]!;
    const around = chainOf(ir, op.module);
    const events: HookEvent[] = [];
    leave(events, new Set(around));
    const entering = around.filter((m) => !entered.has(m));
    const enter = (m: number) => {
      entered.add(m);
      open.push(m);
      events.push({ kind: 'pre', module: m });
      trace.push(m);
    };
    const region = op.region === null || recomputed.has(op.region) ? null : ir.regions[op.region]!;
    if (region === null) entering.forEach(enter);
    else {
      recomputed.add(op.region!);
      const within = (m: number) => region.firstOp <= ir.modules[m]!.firstOp && ir.modules[m]!.endOp <= region.endOp;
      const holds = (m: number) => ir.modules[m]!.firstOp <= region.firstOp && region.endOp <= ir.modules[m]!.endOp;
      entering.filter(holds).forEach(enter);
      for (const e of flatForward) {
        if (!within(e.module)) continue;
        events.push({ ...e, forward: true });
        if (e.kind === 'pre') trace.push(e.module);
      }
      entering.filter((m) => !holds(m)).forEach(enter);
    }
    if (events.length > 0) backward.set(i, events);
  }
  const end: HookEvent[] = [];
  leave(end, new Set());
  if (end.length > 0) backward.set(-1, end);
  return { forward, backward, trace };
}

/** Forward pre/post hooks by op, in call order (children in order inside their parent). */
function forwardHooks(ir: IR): HookEvent[][] {
  const forward: HookEvent[][] = Array.from({ length: ir.ops.length + 1 }, () => []);
  const visit = (m: number) => {
    const mod = ir.modules[m]!;
    forward[mod.firstOp]!.push({ kind: 'pre', module: m });
    for (const child of [...mod.children].sort((a, b) => a - b)) visit(child);
    forward[mod.endOp]!.push({ kind: 'post', module: m });
  };
  if (ir.modules.length > 0) visit(0);
  return forward;
}

/** By module: whether its post-backward Function fires (every input needing a gradient gets one through the module). */
function postBackwardFires(ir: IR, runs: Uint8Array): boolean[] {
  return ir.modules.map((mod) => {
    const needing = mod.inputs.filter((t) => ir.tensors[t]!.requiresGrad);
    return (
      needing.length > 0 &&
      needing.every((t) => {
        for (let i = mod.firstOp; i < mod.endOp; i += 1) {
          const op = ir.ops[i]!;
          if (runs[i] === 1 && op.inputs.some((input, k) => input === t && op.backward!.inputGrads[k] !== 'none')) return true;
        }
        return false;
      })
    );
  });
}

/** The modules around module `m`, outermost first. */
function chainOf(ir: IR, m: number): number[] {
  const out: number[] = [];
  for (let at: number | null = m; at !== null; at = ir.modules[at]!.parent) out.push(at);
  return out.reverse();
}
