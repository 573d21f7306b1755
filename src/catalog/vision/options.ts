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
