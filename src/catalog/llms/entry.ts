import type { HFConfig } from '../config-reader.js';

/** A catalog LLM: the Hugging Face config (the fields that shape memory) and its published size. */
export interface LlmEntry {
  readonly id: string;
  readonly repo: string;
  readonly config: HFConfig;
  /** Parameter total of the released checkpoint (tied weights once). */
  readonly params: number;
}
