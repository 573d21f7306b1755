/**
 * The calculator page: a form whose state lives in the URL's hash, estimated with vram-ts on
 * every change (debounced). Built by scripts/site.ts into site/dist.
 */
import {
  advise,
  breakdownSvg,
  CATEGORIES,
  decoderMeta,
  fits,
  formatBytes,
  formatCount,
  fromHFConfig,
  GPUS,
  llm,
  LLMS,
  maxFitting,
  mobilenetV3Large,
  mobilenetV3Small,
  sym,
  timelineSvg,
  vision,
  VISION_MODELS,
  VramError,
  type AdviseResult,
  type Dim,
  type Engine,
  type Estimate,
  type EstimateOptions,
  type Layer,
  type OptimizerName,
  type ParallelPlan,
  type Precision,
} from '../src/index.js';

const MOBILENETS = ['mobilenet_v3_small', 'mobilenet_v3_large'] as const;
const CNNS: readonly string[] = [...MOBILENETS, ...VISION_MODELS.filter((m) => !(MOBILENETS as readonly string[]).includes(m))];
const CONFIG = 'config.json';

/** The page's state; every field is in the URL. */
export interface State {
  model: string;
  config: string;
  classes: number;
  mode: 'train' | 'inference';
  batch: number;
  seq: number;
  height: number;
  width: number;
  precision: Precision;
  optimizer: OptimizerName | 'none';
  lora: number;
  qlora: boolean;
  checkpointing: boolean;
  gpu: string;
  gpus: number;
  engine: Engine;
  zero: 0 | 1 | 2 | 3;
  tp: number;
  pp: number;
}

/** The seed's question: MobileNetV3-small, 3 classes, 3×4000×2672 photos, a training step. */
const DEFAULTS: State = {
  model: 'mobilenet_v3_small',
  config: '',
  classes: 3,
  mode: 'train',
  batch: 1,
  seq: 2048,
  height: 4000,
  width: 2672,
  precision: 'fp32',
  optimizer: 'adam',
  lora: 0,
  qlora: false,
  checkpointing: false,
  gpu: 'A100-80GB',
  gpus: 1,
  engine: 'fsdp2',
  zero: 3,
  tp: 1,
  pp: 1,
};

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const form = $<HTMLFormElement>('form');
const field = (name: keyof State) => form.elements.namedItem(name) as HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

const kindOf = (model: string): 'llm' | 'cnn' | 'config' => (model === CONFIG ? 'config' : CNNS.includes(model) ? 'cnn' : 'llm');

function fillSelects(): void {
  const model = field('model') as HTMLSelectElement;
  const group = (label: string, values: readonly string[], text: (v: string) => string = (v) => v) =>
    `<optgroup label="${label}">${values.map((v) => `<option value="${v}">${text(v)}</option>`).join('')}</optgroup>`;
  model.innerHTML =
    group(
      'Language models',
      LLMS.map((e) => e.id),
      (id) => `${id} (${LLMS.find((e) => e.id === id)!.repo})`,
    ) +
    group('Image models', CNNS) +
    `<optgroup label="Your own"><option value="${CONFIG}">paste a Hugging Face config.json…</option></optgroup>`;
  (field('gpu') as HTMLSelectElement).innerHTML = GPUS.map((g) => `<option value="${g.name}">${g.name} (${formatBytes(g.memoryBytes)})</option>`).join('');
}

// ---- state <-> URL and form ----

const NUMBERS = ['classes', 'batch', 'seq', 'height', 'width', 'lora', 'gpus', 'zero', 'tp', 'pp'] as const;
const BOOLEANS = ['qlora', 'checkpointing'] as const;

/** The state a URL hash (`#model=…&batch=…`) describes, defaults for what it leaves out. */
export function parseHash(hash: string): State {
  const params = new URLSearchParams(hash.replace(/^#/, ''));
  const state: Record<string, unknown> = { ...DEFAULTS };
  for (const [key, value] of params) {
    if (!(key in DEFAULTS)) continue;
    if ((NUMBERS as readonly string[]).includes(key)) {
      const n = Number(value);
      if (Number.isSafeInteger(n) && n >= 0) state[key] = n;
    } else if ((BOOLEANS as readonly string[]).includes(key)) state[key] = value === '1' || value === 'true';
    else state[key] = value;
  }
  return state as unknown as State;
}

/** The hash of a state: only what differs from the defaults. */
export function toHash(state: State): string {
  const params = new URLSearchParams();
  for (const key of Object.keys(DEFAULTS) as (keyof State)[]) {
    const value = state[key];
    if (value === DEFAULTS[key]) continue;
    params.set(key, typeof value === 'boolean' ? (value ? '1' : '0') : String(value));
  }
  return params.toString();
}

function writeForm(state: State): void {
  for (const key of Object.keys(DEFAULTS) as (keyof State)[]) {
    const el = field(key);
    if (el === null) continue;
    if (el instanceof HTMLInputElement && el.type === 'checkbox') el.checked = Boolean(state[key]);
    else el.value = String(state[key]);
  }
}

function readForm(): State {
  const state: Record<string, unknown> = {};
  for (const key of Object.keys(DEFAULTS) as (keyof State)[]) {
    const el = field(key);
    if (el instanceof HTMLInputElement && el.type === 'checkbox') state[key] = el.checked;
    else if ((NUMBERS as readonly string[]).includes(key)) {
      const n = Number(el.value);
      state[key] = Number.isFinite(n) ? Math.floor(n) : DEFAULTS[key];
    } else state[key] = el.value;
  }
  return state as unknown as State;
}

function showFor(state: State): void {
  const kind = kindOf(state.model);
  const toggle = (selector: string, visible: boolean) => {
    for (const el of document.querySelectorAll<HTMLElement>(selector)) el.classList.toggle('hidden', !visible);
  };
  toggle('.cnn-only', kind === 'cnn');
  toggle('.llm-only', kind !== 'cnn');
  toggle('.config-only', kind === 'config');
  toggle('.train-only', state.mode === 'train');
  (field('zero') as HTMLSelectElement).disabled = state.engine !== 'deepspeed';
  (field('qlora') as HTMLInputElement).disabled = state.lora === 0;
}

// ---- the estimate ----

class InputError extends Error {}

function buildModel(state: State): Layer {
  const kind = kindOf(state.model);
  const tensorParallel = state.mode === 'train' && state.tp > 1 ? { tensorParallel: { size: state.tp } } : {};
  if (kind === 'cnn') {
    if (state.model === 'mobilenet_v3_small') return mobilenetV3Small({ numClasses: state.classes });
    if (state.model === 'mobilenet_v3_large') return mobilenetV3Large({ numClasses: state.classes });
    return vision(state.model, { numClasses: state.classes, ...(state.model.startsWith('vit_') ? { imageSize: state.height } : {}) });
  }
  if (kind === 'llm') return llm(state.model, tensorParallel);
  if (state.config.trim() === '') throw new InputError('Paste a config.json to estimate it.');
  let config: unknown;
  try {
    config = JSON.parse(state.config.replace(/^\uFEFF/, ''));
  } catch (error) {
    throw new InputError(`config.json is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new InputError('config.json holds one JSON object.');
  return fromHFConfig(config as Record<string, unknown>, tensorParallel);
}

/** The estimate options of a state, with `batch` and the size in place (numbers or symbols). */
export function optionsOf(state: State, model: Layer, batch: Dim = state.batch, size?: Dim): EstimateOptions {
  const kind = kindOf(state.model);
  const input: Dim[] = kind === 'cnn' ? [batch, 3, size ?? state.height, size ?? state.width] : [batch, size ?? state.seq];
  const train = state.mode === 'train';
  let parallel: ParallelPlan | undefined;
  if (train && state.gpus > 1) {
    const tp = kind === 'cnn' ? 1 : state.tp;
    if (state.gpus % (tp * state.pp) !== 0)
      throw new InputError(`GPUs (${state.gpus}) must be a multiple of tensor parallel × pipeline stages (${tp * state.pp}).`);
    const dp = state.gpus / (tp * state.pp);
    parallel = {
      ...(dp > 1 ? { engine: state.engine } : {}),
      dp,
      rank: 0,
      ...(dp > 1 && state.engine === 'deepspeed' ? { zero: state.zero } : {}),
      ...(tp > 1 ? { tp } : {}),
      ...(state.pp > 1 ? { pp: state.pp } : {}),
    };
  } else if (train && (state.tp > 1 || state.pp > 1)) {
    throw new InputError('Tensor parallelism and pipeline stages need more than one GPU.');
  }
  let checkpoint: EstimateOptions['checkpoint'];
  if (train && state.checkpointing) {
    // torchvision's trees: ResNets' four stages, ViTs' encoder blocks, the others' feature blocks.
    if (kind === 'cnn')
      checkpoint = /resne/.test(state.model)
        ? { modules: ['layer1', 'layer2', 'layer3', 'layer4'] }
        : state.model.startsWith('vit_')
          ? { within: 'encoder.layers', every: 1 }
          : { within: 'features', every: 1 };
    else {
      const meta = decoderMeta(model);
      checkpoint = { modules: Array.from({ length: meta.layers }, (_, i) => (meta.family === 'gpt2' ? `transformer.h.${i}` : `model.layers.${i}`)) };
    }
  }
  if (state.qlora && state.lora === 0) throw new InputError('QLoRA needs a LoRA rank.');
  return {
    input,
    mode: state.mode,
    precision: state.precision,
    ...(train ? { optimizer: state.optimizer === 'none' ? null : state.optimizer } : {}),
    ...(checkpoint !== undefined ? { checkpoint } : {}),
    ...(train && state.lora > 0 ? { lora: { rank: state.lora, quantizeBase: state.qlora } } : {}),
    ...(parallel !== undefined ? { parallel } : {}),
  };
}

const message = (error: unknown) =>
  error instanceof VramError || error instanceof InputError ? error.message : error instanceof Error ? `${error.name}: ${error.message}` : String(error);

function largest(model: Layer, state: State, name: 'B' | 'S' | 'R'): { value: number | null; why?: string } {
  try {
    const symbol = sym(name);
    const options = name === 'B' ? optionsOf(state, model, symbol) : optionsOf(state, model, state.batch, symbol);
    return { value: maxFitting(model, name, { ...options, gpu: state.gpu }) };
  } catch (error) {
    return { value: null, why: message(error) };
  }
}

const row = (label: string, bytes: number, key: string) =>
  `<tr data-key="${key}"><th scope="row">${label}</th><td class="num" data-bytes="${bytes}">${formatCount(bytes)}</td><td class="num">${formatBytes(bytes)}</td></tr>`;

function render(state: State): void {
  const results = $('results');
  const error = $('error');
  results.setAttribute('aria-busy', 'true');
  try {
    const model = buildModel(state);
    const options = optionsOf(state, model);
    // The verdict's estimate is the page's (with its timeline): capacity − runtime lines against reserved.
    const verdict = fits(model, { ...options, timeline: true, gpu: state.gpu });
    const result: Estimate = verdict.estimate;
    const bytes = result.bytes;
    const peak = bytes.peak as number;
    const budget = verdict.capacity;
    const ranks = options.parallel !== undefined ? ` per GPU (rank 0 of ${state.gpus})` : '';
    const line = (label: string, value: number, id: string, note = '') =>
      `<tr><th scope="row">${label}</th><td class="num" id="${id}" data-bytes="${value}">${value < 0 ? '−' : ''}${formatBytes(Math.abs(value))}</td><td>${note}</td></tr>`;
    const lines = [
      line(
        'capacity',
        verdict.capacity,
        'fit-capacity',
        verdict.capacityFrom === 'torch'
          ? 'as PyTorch reports it'
          : verdict.capacityFrom === 'driver'
            ? "the driver's total (PyTorch's figure not known)"
            : 'as given',
      ),
      ...verdict.runtime.map((r, i) => line(`− ${r.label}`, r.bytes, `fit-runtime-${i}`, r.source)),
      line('= usable', verdict.usable, 'fit-usable'),
      line(
        verdict.reservedFrom === 'allocator' ? '− reserved by the caching allocator' : '− allocated peak',
        verdict.reserved,
        'reserved',
        verdict.reservedFrom === 'allocator'
          ? `allocated ${formatBytes(verdict.allocated)} + fragmentation ${formatBytes(verdict.fragmentation)} at the peak`
          : 'no allocator replay',
      ),
      line('= headroom', verdict.headroom, 'fit-headroom'),
    ];
    $('verdict').innerHTML =
      `Peak <strong id="peak" data-bytes="${peak}">${formatBytes(peak)}</strong>${ranks} — <span class="${verdict.fits ? 'fits' : 'nofit'}">${verdict.fits ? 'fits' : 'does not fit'}</span> ${state.gpu} (${formatBytes(verdict.capacity)}, ${((verdict.needed / verdict.capacity) * 100).toFixed(1)}% with the runtime).` +
      `<table id="fit-lines" class="fit-lines"><tbody>${lines.join('')}</tbody></table>`;
    const train = state.mode === 'train';
    const rows = [
      row(
        `parameters (${formatCount(result.params.total)}${result.params.trainable !== result.params.total ? `, ${formatCount(result.params.trainable)} trainable` : ''})`,
        bytes.parameters as number,
        'parameters',
      ),
      row('buffers', bytes.buffers as number, 'buffers'),
      row('input', bytes.input as number, 'input'),
      row(train ? 'activations saved for backward' : 'activations', bytes.activations as number, 'activations'),
      ...(train
        ? [
            row('gradients', bytes.gradients as number, 'gradients'),
            row(`optimizer state (${result.optimizer?.name ?? 'none'})`, bytes.optimizer as number, 'optimizer'),
          ]
        : []),
      row('<strong>peak of the step</strong>', peak, 'peak'),
    ];
    $('figures').querySelector('tbody')!.innerHTML = rows.join('');
    $('peak-caption').textContent = `Live at the peak: ${result.peak.phase}, ${result.peak.label}`;
    $('at-peak').querySelector('tbody')!.innerHTML = CATEGORIES.filter((c) => result.peak.byCategory[c] !== 0)
      .map((c) => row(c, result.peak.byCategory[c] as number, c))
      .join('');
    const kind = kindOf(state.model);
    const b = largest(model, state, 'B');
    const size = largest(model, state, kind === 'cnn' ? 'R' : 'S');
    const dd = (r: { value: number | null; why?: string }, unit: string) =>
      r.value === null
        ? `<span title="${(r.why ?? '').replace(/"/g, '&quot;')}">— (${r.why ?? 'not solvable'})</span>`
        : r.value === 0
          ? 'none: not even 1 fits'
          : `${formatCount(r.value)}${unit}`;
    const sizeLabel = kind === 'cnn' ? `Square image side at batch ${state.batch}` : `Context (tokens) at batch ${state.batch}`;
    const sizeUnit = kind === 'cnn' ? ' px' : ' tokens';
    $('fitting').innerHTML =
      `<dt>${options.parallel !== undefined ? 'Micro-batch per GPU' : 'Batch'} at this ${kind === 'cnn' ? 'size' : 'context'}</dt><dd id="max-batch" data-value="${b.value ?? ''}">${dd(b, '')}</dd><dt>${sizeLabel}</dt><dd id="max-size" data-value="${size.value ?? ''}">${dd(size, sizeUnit)}</dd>`;
    $('timeline').innerHTML = result.timeline.length > 0 ? timelineSvg(result, { title: 'Live memory over the step', capacity: budget }) : '';
    $('breakdown').innerHTML = breakdownSvg(result, { title: 'Memory at the peak', capacity: budget });
    error.hidden = true;
    results.dataset.state = toHash(state);
    scheduleAdvice(state, model, options);
  } catch (e) {
    error.textContent = message(e);
    error.hidden = false;
    results.dataset.state = `error:${toHash(state)}`;
    clearAdvice(state);
  } finally {
    results.setAttribute('aria-busy', 'false');
  }
}

// ---- what would fit ----

const html = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const signed = (bytes: number) => `${bytes < 0 ? '−' : ''}${formatBytes(Math.abs(bytes))}`;
/** A cost kind in words (advise ranks fitting levers by these, cheapest first). */
const COST_WORDS: Record<string, string> = {
  none: 'free',
  throughput: 'slower steps',
  compute: 'more compute',
  hardware: 'more hardware',
  quality: 'may change what trains',
};

let adviceTimer: ReturnType<typeof setTimeout> | undefined;

/** The panel empty: the page's job could not be estimated (the error is shown above). */
function clearAdvice(state: State): void {
  clearTimeout(adviceTimer);
  const panel = $('advice');
  panel.innerHTML = '<p class="muted">— (no estimate to improve)</p>';
  panel.setAttribute('aria-busy', 'false');
  panel.dataset.state = `error:${toHash(state)}`;
}

/** advise() takes a while (every lever is a real estimate): it runs once the main result has painted, and only for the latest state. */
function scheduleAdvice(state: State, model: Layer, options: EstimateOptions): void {
  clearTimeout(adviceTimer);
  const panel = $('advice');
  const hash = toHash(state);
  panel.innerHTML = '<p class="muted">computing…</p>';
  panel.setAttribute('aria-busy', 'true');
  panel.dataset.state = `computing:${hash}`;
  adviceTimer = setTimeout(() => {
    try {
      const train = state.mode === 'train';
      panel.innerHTML = adviceHtml(advise(model, { ...options, gpu: state.gpu, ...(train && state.gpus > 1 ? { gpus: state.gpus } : {}) }), state);
      panel.dataset.state = hash;
    } catch (e) {
      panel.innerHTML = `<p class="error" role="alert">${html(message(e))}</p>`;
      panel.dataset.state = `error:${hash}`;
    } finally {
      panel.setAttribute('aria-busy', 'false');
    }
  }, 50);
}

/** The panel: the baseline's need against the GPU, then the levers that fit, cheapest first (or plainly none). */
function adviceHtml(result: AdviseResult, state: State): string {
  const b = result.baseline;
  const need = `The job needs <strong id="advice-needed" data-bytes="${b.needed}">${formatBytes(b.needed)}</strong> of ${state.gpu}'s <span id="advice-capacity" data-bytes="${b.capacity}">${formatBytes(b.capacity)}</span>`;
  if (b.fits)
    return `<p id="advice-baseline">${need}: <span class="fits">it fits already</span>, ${b.headroom >= 0 ? `with ${formatBytes(b.headroom)} to spare` : `${formatBytes(-b.headroom)} past the usable memory, which the allocator frees its cache for`}. Nothing to change.</p>`;
  const fitting = result.levers.filter((l) => l.fits);
  const lines = [`<p id="advice-baseline">${need}: <span class="nofit">${formatBytes(-b.headroom)} too much</span>.</p>`];
  if (fitting.length === 0) {
    const closest = result.levers[0];
    lines.push(
      `<p id="advice-none" class="nofit">No change fits: none of the ${result.levers.length} levers tried, alone or combined, brings the job under ${formatBytes(b.capacity)}.` +
        (closest !== undefined ? ` The closest, ${html(closest.description)}, still needs ${formatBytes(closest.needed)}.` : '') +
        ' A larger GPU or more GPUs (with a data-parallel engine) is the way left.</p>',
    );
  } else {
    const rows = fitting.map(
      (l) =>
        `<tr data-lever="${html(l.lever)}" data-cost="${l.cost.kind}"><th scope="row">${html(l.description)}</th>` +
        `<td><strong class="cost">${COST_WORDS[l.cost.kind] ?? l.cost.kind}</strong> <span class="note">${html(l.cost.note)}</span></td>` +
        `<td class="num needed" data-bytes="${l.needed}">${formatBytes(l.needed)}</td><td class="num headroom" data-bytes="${l.headroom}">${signed(l.headroom)}${l.headroom < 0 ? '<span class="note">past the usable memory: the allocator frees its cache and retries</span>' : ''}</td></tr>`,
    );
    lines.push(
      `<table id="advice-levers"><caption>${fitting.length === 1 ? 'One change fits' : `${fitting.length} changes fit`}, cheapest first</caption>` +
        '<thead><tr><th scope="col">Change</th><th scope="col">Cost</th><th scope="col">Needed</th><th scope="col">Headroom</th></tr></thead>' +
        `<tbody>${rows.join('')}</tbody></table>`,
    );
  }
  const rest = result.levers.length - fitting.length;
  if (rest > 0 || result.skipped.length > 0)
    lines.push(
      `<p id="advice-rest" class="muted">Also tried: ${rest} ${rest === 1 ? 'change' : 'changes'} that ${rest === 1 ? 'does' : 'do'} not fit; ` +
        `<span title="${html(result.skipped.map((s) => `${s.lever}: ${s.reason}`).join('\n'))}">${result.skipped.length} that do not apply to this job</span>.</p>`,
    );
  return lines.join('');
}

// ---- wiring ----

let timer: ReturnType<typeof setTimeout> | undefined;
function update(): void {
  const state = readForm();
  showFor(state);
  const hash = toHash(state);
  if (location.hash.replace(/^#/, '') !== hash) history.replaceState(null, '', hash === '' ? location.pathname + location.search : `#${hash}`);
  render(state);
}
function schedule(): void {
  clearTimeout(timer);
  timer = setTimeout(update, 150);
}

function load(): void {
  const state = parseHash(location.hash);
  writeForm(state);
  // A value the select does not offer (an unknown model or GPU) falls back to the default.
  for (const key of ['model', 'gpu', 'mode', 'precision', 'optimizer', 'engine'] as const) {
    const el = field(key) as HTMLSelectElement;
    if (el.value === '') el.value = String(DEFAULTS[key]);
  }
  update();
}

fillSelects();
form.addEventListener('input', schedule);
form.addEventListener('change', schedule);
form.addEventListener('submit', (e) => e.preventDefault());
window.addEventListener('hashchange', load);
$('share').addEventListener('click', () => {
  const status = $('shared');
  const fallback = 'Copy the address bar: it holds this result.';
  const copied = navigator.clipboard?.writeText(location.href);
  if (copied === undefined) status.textContent = fallback;
  else
    copied.then(
      () => {
        status.textContent = 'Link copied.';
      },
      () => {
        status.textContent = fallback;
      },
    );
});
load();
