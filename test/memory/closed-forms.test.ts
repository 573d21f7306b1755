/**
 * The published closed forms against the upstream functions run as they are
 * (test/fixtures/distributed/estimators.json, made by tools/compat/distributed_estimators.py from
 * DeepSpeed edaa7221 and Megatron-LM d98e8a64): every returned number equal, to the last bit.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { deepspeedZero2, deepspeedZero3, megatronTheoretical, zeroPaper, type MegatronArgs } from '../../src/index.js';

interface Case {
  readonly id: string;
  readonly tool: string;
  readonly function: string | null;
  readonly inputs: Record<string, any>;
  readonly returns?: readonly (number | null)[];
  readonly args?: Record<string, any>;
  readonly numMicrobatches?: number | null;
  readonly calls?: readonly { readonly function: string; readonly returns: unknown }[];
  readonly stages?: Record<string, { readonly bytes: number }>;
}

const fixture = JSON.parse(readFileSync(new URL('../fixtures/distributed/estimators.json', import.meta.url), 'utf8')) as { cases: Case[] };
const direct = (tool: string, fn: string) => fixture.cases.filter((c) => c.tool === tool && c.function === fn);

describe('the ZeRO paper', () => {
  it('reproduces the model-state table (7.5B parameters, 64 GPUs): 120 / 31.4 / 16.6 / 1.9 GB', () => {
    const paper = fixture.cases.find((c) => c.tool === 'zero-paper')!;
    const ours = zeroPaper({ params: paper.inputs.Psi, gpus: paper.inputs.Nd, k: paper.inputs.K });
    expect([ours.baseline, ours.stage1, ours.stage2, ours.stage3]).toEqual(Object.values(paper.stages!).map((s) => s.bytes));
  });
});

describe("DeepSpeed's estimators", () => {
  const zero2 = direct('deepspeed-zero2', 'estimate_zero2_model_states_mem_needs');
  const zero3 = direct('deepspeed-zero3', 'estimate_zero3_model_states_mem_needs');
  it(`estimate_zero2_model_states_mem_needs: ${zero2.length} calls`, () => {
    expect(zero2.length).toBeGreaterThanOrEqual(5);
    for (const c of zero2) {
      const i = c.inputs;
      const r = deepspeedZero2({
        totalParams: i.total_params,
        gpusPerNode: i.num_gpus_per_node,
        nodes: i.num_nodes,
        cpuOffload: i.cpu_offload,
        ...(i.additional_buffer_factor !== undefined ? { additionalBufferFactor: i.additional_buffer_factor } : {}),
      });
      expect([r.cpu, r.gpu], c.id).toEqual(c.returns);
    }
  });
  it(`estimate_zero3_model_states_mem_needs: ${zero3.length} calls, t5-3b's documented 6.09 / 0.78 / 0.12 GB among them`, () => {
    expect(zero3.length).toBeGreaterThanOrEqual(5);
    for (const c of zero3) {
      const i = c.inputs;
      const r = deepspeedZero3({
        totalParams: i.total_params,
        largestLayerParams: i.largest_layer_params,
        gpusPerNode: i.num_gpus_per_node,
        nodes: i.num_nodes,
        cpuOffload: i.cpu_offload,
        cpuOffloadParams: i.cpu_offload_params,
        zeroInit: i.zero_init,
        ...(i.additional_buffer_factor !== undefined ? { additionalBufferFactor: i.additional_buffer_factor } : {}),
      });
      expect([r.cpu, r.gpu, r.largestLayerMemory], c.id).toEqual(c.returns);
    }
    const t5 = (offload: boolean, params: boolean) =>
      deepspeedZero3({ totalParams: 2851e6, largestLayerParams: 32e6, gpusPerNode: 8, cpuOffload: offload, cpuOffloadParams: params }).gpu / 2 ** 30;
    expect([t5(false, false), t5(true, false), t5(true, true)].map((g) => g.toFixed(2))).toEqual(['6.09', '0.78', '0.12']);
  });
});

/** A fixture case's Megatron namespace as megatronTheoretical's arguments. */
function megatronArgs(a: Record<string, any>): MegatronArgs {
  return {
    numLayers: a.num_layers,
    hiddenSize: a.hidden_size,
    numAttentionHeads: a.num_attention_heads,
    kvChannels: a.kv_channels,
    ffnHiddenSize: a.ffn_hidden_size,
    ...(a.group_query_attention ? { numQueryGroups: a.num_query_groups } : {}),
    swiglu: a.swiglu,
    normalization: a.normalization,
    untieEmbeddingsAndOutputWeights: a.untie_embeddings_and_output_weights,
    paddedVocabSize: a.padded_vocab_size,
    tensorModelParallelSize: a.tensor_model_parallel_size,
    pipelineModelParallelSize: a.pipeline_model_parallel_size,
    ...(a.virtual_pipeline_model_parallel_size !== null ? { virtualPipelineModelParallelSize: a.virtual_pipeline_model_parallel_size } : {}),
    dataParallelSize: a.data_parallel_size,
    useDistributedOptimizer: a.use_distributed_optimizer,
    seqLength: a.seq_length,
    microBatchSize: a.micro_batch_size,
    sequenceParallel: a.sequence_parallel,
    ...(a.recompute_granularity !== null ? { recomputeGranularity: a.recompute_granularity } : {}),
  };
}

describe("Megatron-LM's theoretical memory", () => {
  // Dense models: MoE, multi-latent attention, MTP and hybrid Mamba are outside what vram-ts reproduces.
  const dense = fixture.cases.filter(
    (c) =>
      c.tool === 'megatron' &&
      c.args !== undefined &&
      c.args.num_experts === null &&
      !c.args.multi_latent_attention &&
      c.args.mtp_num_layers === null &&
      c.args.hybrid_layer_pattern === null,
  );
  it(`report_theoretical_memory on ${dense.length} configurations, TP, SP, PP and interleaved VPP among them`, () => {
    expect(dense.length).toBeGreaterThanOrEqual(3);
    expect(dense.some((c) => c.args!.sequence_parallel && c.args!.recompute_granularity === 'selective')).toBe(true);
    expect(dense.some((c) => c.args!.virtual_pipeline_model_parallel_size !== null)).toBe(true);
    expect(dense.some((c) => c.args!.pipeline_model_parallel_size > 1 && c.args!.virtual_pipeline_model_parallel_size === null)).toBe(true);
    for (const c of dense) {
      const ours = megatronTheoretical(megatronArgs(c.args!), c.numMicrobatches ?? undefined);
      const call = (fn: string) => c.calls!.find((k) => k.function === fn)!.returns;
      expect(ours.weightAndOptimizer, c.id).toBe(call('compute_weight_and_optimizer_memory'));
      expect(ours.activation, c.id).toBe(call(ours.path === 'sp' ? 'compute_activation_memory' : 'compute_activation_memory_without_sp'));
      expect(ours.reportMiB, c.id).toEqual(call('report_theoretical_memory'));
    }
  });
});
