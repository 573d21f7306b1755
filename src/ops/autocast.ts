/**
 * torch.autocast's op lists (aten/src/ATen/autocast_mode.cpp, CUDA): `lower` ops run in
 * the autocast dtype (inputs and weights cast down, weights cached for the forward),
 * `fp32` ops run in float32 (inputs cast up); every other op runs in its inputs' dtype
 * (elementwise ops promote mixed inputs to the wider type).
 */
export const AUTOCAST_POLICY: Readonly<Record<string, 'lower' | 'fp32'>> = Object.freeze({
  conv2d: 'lower',
  linear: 'lower',
  matmul: 'lower',
  bmm: 'lower',
  addmm: 'lower',
  baddbmm: 'lower',
  scaled_dot_product_attention: 'lower',
  log_softmax: 'fp32',
  softmax: 'fp32',
  layer_norm: 'fp32',
  group_norm: 'fp32',
  rms_norm: 'fp32',
  nll_loss: 'fp32',
  cross_entropy: 'fp32',
  mse_loss: 'fp32',
  pow: 'fp32',
  rsqrt: 'fp32',
  exp: 'fp32',
  sum: 'fp32',
  cumsum: 'fp32',
});
