import type { SeqLayer } from '../../nn/types.js';

/** Options of {@link vision}, as torchvision's constructors take them. */
export interface VisionOptions {
  /** Classifier outputs (default 1000). */
  readonly numClasses?: number;
  /** EfficientNet's classifier dropout (default: the variant's, 0.2 for B0). */
  readonly dropout?: number;
  /** EfficientNet's stochastic depth probability, spread linearly over the blocks (default 0.2). */
  readonly stochasticDepthProb?: number;
  /** ViT's `image_size` (default 224): the input must be this size, the position embedding is sized for it. */
  readonly imageSize?: number;
}

/**
 * One family's part of the vision catalog: the torchvision names it builds, and the builder of
 * one of them from the caller's options (it checks the options that family takes).
 */
export interface VisionFamily {
  readonly names: readonly string[];
  readonly build: (name: string, options: VisionOptions) => SeqLayer;
}
