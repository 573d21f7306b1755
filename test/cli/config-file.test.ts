/** The strict YAML reader of trainer config files: what such files hold, and an error naming the line for anything else. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseYaml, stripComment } from '../../src/cli/config-file.js';
import { CliError } from '../../src/cli/errors.js';

/** The `file:line` an error names, or undefined when it parses. */
function errorAt(text: string): string | undefined {
  try {
    parseYaml(text, 'config.yaml');
  } catch (error) {
    if (error instanceof CliError) return `${error.path}: ${error.message}`;
    throw error;
  }
  return undefined;
}

describe('parseYaml', () => {
  it('reads scalars, flow and block lists, one nested mapping, comments and blank lines', () => {
    const text = `# GRPO
learning_rate: 1e-6
beta: 0.04
num_generations: 8
max_grad_norm: -1.5
bf16: true
fp16: False
tf32: ~
hub_model_id: null
run_name:
output_dir: "runs/a # not a comment"   # a comment
project: 'it''s'
optim: adamw_torch_fused
report_to: [none, "wandb"]
reward_weights: []

target_modules:
- q_proj
- v_proj
include_for_metrics:
  - inputs
gradient_checkpointing_kwargs:
  use_reentrant: false
model_init_kwargs: {dtype: bfloat16, attn_implementation: "sdpa"}
version: 1.13.0
url: http://host/x
escaped: "a\\tb\\u00e9"
`;
    expect(parseYaml(text, 'config.yaml')).toEqual({
      learning_rate: 1e-6,
      beta: 0.04,
      num_generations: 8,
      max_grad_norm: -1.5,
      bf16: true,
      fp16: false,
      tf32: null,
      hub_model_id: null,
      run_name: null,
      output_dir: 'runs/a # not a comment',
      project: "it's",
      optim: 'adamw_torch_fused',
      report_to: ['none', 'wandb'],
      reward_weights: [],
      target_modules: ['q_proj', 'v_proj'],
      include_for_metrics: ['inputs'],
      gradient_checkpointing_kwargs: { use_reentrant: false },
      model_init_kwargs: { dtype: 'bfloat16', attn_implementation: 'sdpa' },
      version: '1.13.0',
      url: 'http://host/x',
      escaped: 'a\tbé',
    });
    expect(parseYaml('', 'config.yaml')).toEqual({});
    expect(parseYaml('# only a comment\n\n', 'config.yaml')).toEqual({});
  });

  it('refuses everything else, naming the line', () => {
    const cases: [string, RegExp][] = [
      ['a: 1\nb: &anchor 2', /^config\.yaml:2: anchors/],
      ['a: *alias', /^config\.yaml:1: aliases/],
      ['a: !!float 1', /^config\.yaml:1: tags/],
      ['a: 1\n---\nb: 2', /^config\.yaml:2: document markers/],
      ['%YAML 1.2\na: 1', /^config\.yaml:1: YAML directives/],
      ['a: |\n  text', /^config\.yaml:1: multi-line strings/],
      ['a: >-\n  text', /^config\.yaml:1: multi-line strings/],
      ['a: "open\n  b"', /^config\.yaml:1: the " string does not end/],
      ['a: [1,\n  2]', /^config\.yaml:1: the \[ does not close/],
      ['a:\n  b:\n    c: 1', /^config\.yaml:2: b: a mapping nested deeper/],
      ['a: {b: {c: 1}}', /^config\.yaml:1: a flow collection inside/],
      ['a: 1\na: 2', /^config\.yaml:2: the key "a" appears twice/],
      ['- a\n- b', /^config\.yaml:1: a list item where a key/],
      ['just a string', /^config\.yaml:1: expected `key: value`/],
      ['a: yes', /^config\.yaml:1: "yes" is a boolean in YAML 1\.1/],
      ['a: 0x10', /^config\.yaml:1: "0x10"/],
      ['a: 010', /^config\.yaml:1: "010" is an octal/],
      ['a: 1_000', /^config\.yaml:1: "1_000"/],
      ['a: 2024-01-31', /^config\.yaml:1: "2024-01-31" is a timestamp/],
      ['a: .inf', /^config\.yaml:1: ".inf"/],
      ['a: b: c', /^config\.yaml:1: a mapping inside a value/],
      ['a:\n  - {b: 1}', /^config\.yaml:2: a mapping inside a list/],
      ['a:\n  - b:\n    c: 1', /^config\.yaml:2: b: a mapping nested deeper/],
      ['a:\n  - b: 1\n     c: 2', /^config\.yaml:3: unexpected indentation/],
      ['a:\n  - b\n    c', /^config\.yaml:3: unexpected indentation/],
      ['a:\n  b:\n    - c: 1', /^config\.yaml:2: b: a mapping nested deeper/],
      ['a:\n  - [1]', /^config\.yaml:2: a list inside a list/],
      ['a:\n  b: 1\n   c: 2', /^config\.yaml:3: unexpected indentation/],
      ['  a: 1', /^config\.yaml:1: unexpected indentation/],
      ['a:\n\tb: 1', /^config\.yaml:2: a tab in the indentation/],
      ['? a\n: b', /^config\.yaml:1: complex keys/],
      ['a: "bad \\q escape"', /^config\.yaml:1: unknown escape/],
      ['a: "x" trailing', /^config\.yaml:1: text after the closing "/],
      ['a: [1, , 2]', /^config\.yaml:1: an empty item/],
    ];
    for (const [text, expected] of cases) expect(errorAt(text), JSON.stringify(text)).toMatch(expected);
  });

  it("reads a value on the lines under its key, plain lines folded with spaces (TRL's example_config.yaml)", () => {
    // huggingface/trl examples/cli_configs/example_config.yaml, verbatim (its comments cut).
    const trl =
      'model_name_or_path:\n  Qwen/Qwen2.5-0.5B\ndataset_name:\n  stanfordnlp/imdb\nreport_to:\n  none\nlearning_rate:\n  0.0001\nlr_scheduler_type:\n  cosine\n';
    expect(parseYaml(trl, 'config.yaml')).toEqual({
      model_name_or_path: 'Qwen/Qwen2.5-0.5B',
      dataset_name: 'stanfordnlp/imdb',
      report_to: 'none',
      learning_rate: 0.0001,
      lr_scheduler_type: 'cosine',
    });
    expect(parseYaml('a:\n  two\n   words\nb:\n  [1, 2]\nc:\n  "x # y"\nd:\n  {e: 1}\n', 'config.yaml')).toEqual({
      a: 'two words',
      b: [1, 2],
      c: 'x # y',
      d: { e: 1 },
    });
    expect(parseYaml('a:\nb: 1', 'config.yaml')).toEqual({ a: null, b: 1 });
    // A continuation needs only to be deeper than its key (PyYAML reads this as 'b c').
    expect(parseYaml('a:\n  b\n c', 'config.yaml')).toEqual({ a: 'b c' });
    for (const [text, expected] of [
      ['a:\n  b\n  c: 1', /^config\.yaml:3: a key or list item inside a plain scalar/],
      ['a:\n  b\n  - c', /^config\.yaml:3: a key or list item inside a plain scalar/],
      ['a:\n  "b"\n  c', /^config\.yaml:3: a quoted or flow value over several lines/],
      ['a:\n  yes', /^config\.yaml:2: "yes" is a boolean in YAML 1\.1/],
    ] as const)
      expect(errorAt(text), JSON.stringify(text)).toMatch(expected);
  });

  it("reads a top-level key's list of mappings of scalars (TRL's dataset mixtures)", () => {
    // huggingface/trl docs/source/clis.md at f2cd57710ae345ea6428ae95363267fcf38a3dc8, "Using dataset mixtures" (GRPO).
    const grpo =
      '# grpo_config.yaml\nmodel_name_or_path: Qwen/Qwen2.5-0.5B\ndatasets:\n  - path: HuggingFaceH4/Polaris-Dataset-53K\n  - path: trl-lib/DeepMath-103K\nreward_funcs:\n  - accuracy_reward\n';
    expect(parseYaml(grpo, 'config.yaml')).toEqual({
      model_name_or_path: 'Qwen/Qwen2.5-0.5B',
      datasets: [{ path: 'HuggingFaceH4/Polaris-Dataset-53K' }, { path: 'trl-lib/DeepMath-103K' }],
      reward_funcs: ['accuracy_reward'],
    });
    expect(parseYaml('d:\n- path: a\n  split: train\n  columns: [u, v]\n- b\n', 'config.yaml')).toEqual({
      d: [{ path: 'a', split: 'train', columns: ['u', 'v'] }, 'b'],
    });
    expect(errorAt('d:\n  - path: a\n    path: b')).toMatch(/^config\.yaml:3: the key "path" appears twice/);
  });

  it('strips comments outside quotes only', () => {
    expect(stripComment('a: b # c')).toBe('a: b');
    expect(stripComment('a: "b # c" # d')).toBe('a: "b # c"');
    expect(stripComment("a: 'it''s # x'")).toBe("a: 'it''s # x'");
    expect(stripComment('a: b#c')).toBe('a: b#c');
    expect(stripComment('# all')).toBe('');
  });
});

/** A scalar as a config file may hold it. */
const scalarArb = fc.oneof(
  fc.integer({ min: -1e9, max: 1e9 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((x) => !Object.is(x, -0)),
  fc.boolean(),
  fc.constant(null),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: 'binary', maxLength: 6 }),
  fc.constantFrom('adamw_torch_fused', 'q_proj', 'runs/grpo', 'http://host:8000/v1', '1.13.0', 'none', 'yes', 'on', '012', '~', '- a', 'a: b', '#x', "it's"),
);

/** A value written as YAML: bare where it reads back as itself (unless `quoteAll`), else JSON-quoted (JSON's escapes are YAML's). */
function yamlScalar(value: unknown, quoteAll = false): string {
  if (typeof value !== 'string') return String(value);
  if (quoteAll) return JSON.stringify(value);
  try {
    if (parseYaml(`k: ${value}`, 'probe.yaml').k === value) return value;
  } catch {
    // Written quoted below.
  }
  return JSON.stringify(value);
}

/** A list of scalars, flow or block form. */
const listArb = fc.array(scalarArb, { maxLength: 4 });
const mappingArb = fc.dictionary(fc.stringMatching(/^[a-z_][a-z0-9_]{0,15}$/), fc.oneof(scalarArb, listArb, listArb), { maxKeys: 8 });

function writeYaml(mapping: Readonly<Record<string, unknown>>, block: boolean, quoteAll: boolean): string {
  return Object.entries(mapping)
    .map(([key, value]) => {
      if (!Array.isArray(value)) return `${key}: ${yamlScalar(value, quoteAll)}  # ${key}\n`;
      if (block && value.length > 0) return `${key}:\n${value.map((v) => `  - ${yamlScalar(v, quoteAll)}\n`).join('')}\n`;
      return `${key}: [${value.map((v) => (typeof v === 'string' ? JSON.stringify(v) : String(v))).join(', ')}]\n`;
    })
    .join('');
}

describe('round trip', () => {
  it('generated mappings of scalars and lists, written as YAML, read back as they were', () => {
    fc.assert(
      fc.property(mappingArb, fc.boolean(), fc.boolean(), (mapping, block, quoteAll) => {
        expect(parseYaml(writeYaml(mapping, block, quoteAll), 'generated.yaml')).toEqual(mapping);
      }),
      { numRuns: Number(process.env.YAML_RUNS ?? 300) },
    );
  });
});
