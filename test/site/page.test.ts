/**
 * The calculator page (site/) in headless Chromium: built from the source, served by a local
 * static server on 127.0.0.1, driven through playwright-core with a system Chromium or the one the
 * @sparticuz/chromium dev dependency ships (test/helpers/chromium.ts).
 */
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { extname, join, normalize, resolve } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSite } from '../../scripts/site.js';
import { advise, estimate, formatBytes, llm, mobilenetV3Small } from '../../src/index.js';
import { launchChromium } from '../helpers/chromium.js';

const root = resolve(import.meta.dirname, '..', '..');
const work = mkdtempSync(join(tmpdir(), 'vram-ts-site-'));
const TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' };

let server: Server;
let base = '';
let browser: Browser;
let page: Page;
const problems: string[] = [];

beforeAll(async () => {
  const dir = await buildSite(join(work, 'dist'));
  server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname)).replace(/^(\.\.[/\\])+/, '');
    const file = join(dir, path.endsWith('/') ? `${path}index.html` : path);
    if (!file.startsWith(dir) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`requestfailed: ${r.url()}`));
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await new Promise((done) => server?.close(done));
  rmSync(work, { recursive: true, force: true });
});

/** The figures the page shows, by row key, in bytes. */
async function figures(): Promise<Record<string, number>> {
  return page.evaluate(() =>
    Object.fromEntries(
      Array.from(document.querySelectorAll('#figures tr[data-key]')).map((tr) => [
        tr.getAttribute('data-key')!,
        Number(tr.querySelector('[data-bytes]')!.getAttribute('data-bytes')),
      ]),
    ),
  );
}

/** Waits until the page has rendered the state whose hash is `hash` (the debounce ran). */
async function settled(hash: string): Promise<void> {
  await page.waitForFunction((h) => document.getElementById('results')?.dataset.state === h, hash, { timeout: 10_000 });
}

/** Waits until the "What would fit" panel has rendered advise's result for the state whose hash is `hash`. */
async function advised(hash: string): Promise<void> {
  await page.waitForFunction((h) => document.getElementById('advice')?.dataset.state === h, hash, { timeout: 30_000 });
}

const expected = (r: ReturnType<typeof estimate>, train = true) => ({
  parameters: r.bytes.parameters,
  buffers: r.bytes.buffers,
  input: r.bytes.input,
  activations: r.bytes.activations,
  ...(train ? { gradients: r.bytes.gradients, optimizer: r.bytes.optimizer } : {}),
  peak: r.bytes.peak,
});

describe('the calculator page', () => {
  it('loads with no console errors and shows the seed case as estimate does in Node', async () => {
    await page.goto(base);
    await settled('');
    expect(await page.inputValue('#model')).toBe('mobilenet_v3_small');
    const seed = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [1, 3, 4000, 2672] });
    expect(await figures()).toEqual(expected(seed));
    expect(await page.getAttribute('#peak', 'data-bytes')).toBe(String(seed.bytes.peak));
    expect(Number(await page.getAttribute('#max-batch', 'data-value'))).toBeGreaterThan(1);
    expect(await page.locator('#timeline svg polygon.area').count()).toBeGreaterThanOrEqual(4);
    expect((await page.locator('#timeline svg line.capacity').count()) + (await page.locator('#timeline svg text.capacity').count())).toBe(1);
    // The chart's phase labels do not overlap as Chromium lays them out.
    const boxes = await page.evaluate(() =>
      Array.from(document.querySelectorAll('#timeline text.phase-label')).map((t) => {
        const b = (t as SVGGraphicsElement).getBBox();
        return { x: b.x, y: b.y, w: b.width, h: b.height };
      }),
    );
    expect(boxes.length).toBeGreaterThanOrEqual(4);
    for (const a of boxes) for (const b of boxes) if (a !== b) expect(a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y).toBe(true);
    // The seed's job fits: the panel says so and lists no change.
    await advised('');
    expect(await page.textContent('#advice-baseline')).toContain('it fits already');
    expect(await page.locator('#advice-levers').count()).toBe(0);

    const shot = join(tmpdir(), `vram-ts-site-${process.pid}.png`);
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`calculator page screenshot: ${shot}`);
    if (statSync(shot).size < 300 * 1024) copyFileSync(shot, join(root, 'site', 'screenshot.png'));
    // The same page on a dark scheme: the charts' text follows the page's colour.
    await page.emulateMedia({ colorScheme: 'dark' });
    const colours = await page.evaluate(() => ({
      body: getComputedStyle(document.body).backgroundColor,
      tick: getComputedStyle(document.querySelector('#timeline text.tick')!).fill,
    }));
    expect(colours.body).toBe('rgb(22, 22, 26)');
    expect(colours.tick).toBe('rgb(230, 230, 234)');
    const dark = join(tmpdir(), `vram-ts-site-${process.pid}-dark.png`);
    await page.screenshot({ path: dark, fullPage: true });
    console.log(`calculator page screenshot (dark): ${dark}`);
    await page.emulateMedia({ colorScheme: 'light' });
    expect(problems).toEqual([]);
  });

  it('updates the figures when an input changes, and puts the state in the URL', async () => {
    await page.fill('#batch', '2');
    await settled('batch=2');
    const two = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [2, 3, 4000, 2672] });
    expect(await figures()).toEqual(expected(two));
    expect(new URL(page.url()).hash).toBe('#batch=2');
    await page.selectOption('#mode', 'inference');
    await settled('mode=inference&batch=2');
    const inference = estimate(mobilenetV3Small({ numClasses: 3 }), { input: [2, 3, 4000, 2672], mode: 'inference' });
    expect(await figures()).toEqual(expected(inference, false));
    expect(problems).toEqual([]);
  });

  it('restores a shared URL', async () => {
    const hash = 'model=qwen2.5-0.5b&seq=512&precision=bf16&optimizer=adamw&lora=8&checkpointing=1&gpu=RTX-4090';
    await page.goto(`${base}#${hash}`);
    await settled(hash);
    expect(await page.inputValue('#model')).toBe('qwen2.5-0.5b');
    expect(await page.inputValue('#seq')).toBe('512');
    expect(await page.inputValue('#gpu')).toBe('RTX-4090');
    expect(await page.isChecked('#checkpointing')).toBe(true);
    const model = llm('qwen2.5-0.5b');
    const layers = Array.from({ length: 24 }, (_, i) => `model.layers.${i}`);
    const r = estimate(model, {
      input: [1, 512],
      precision: 'bf16',
      optimizer: 'adamw',
      lora: { rank: 8, quantizeBase: false },
      checkpoint: { modules: layers },
      mode: 'train',
    });
    expect(await figures()).toEqual(expected(r));
    expect(Number(await page.getAttribute('#max-size', 'data-value'))).toBeGreaterThan(512);
    expect(problems).toEqual([]);
  });

  it('estimates a data-parallel rank and reports bad input without throwing', async () => {
    const hash = 'model=qwen2.5-0.5b&seq=512&precision=bf16&gpus=8&engine=deepspeed&zero=2';
    await page.goto(`${base}#${hash}`);
    await settled(hash);
    const r = estimate(llm('qwen2.5-0.5b'), {
      input: [1, 512],
      precision: 'bf16',
      optimizer: 'adam',
      parallel: { engine: 'deepspeed', dp: 8, rank: 0, zero: 2 },
    });
    expect(await figures()).toEqual(expected(r));
    await page.selectOption('#model', 'config.json');
    await page.fill('#config', '{"model_type": "llama", "hidden_size": 64');
    await page.waitForFunction(() => !document.getElementById('error')!.hidden && document.getElementById('error')!.textContent!.includes('not valid JSON'));
    await page.fill(
      '#config',
      JSON.stringify({
        model_type: 'llama',
        hidden_size: 256,
        intermediate_size: 512,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        vocab_size: 1000,
      }),
    );
    await page.waitForFunction(() => document.getElementById('error')!.hidden);
    expect(Number(await page.getAttribute('#peak', 'data-bytes'))).toBeGreaterThan(0);
    expect(problems).toEqual([]);
  });

  it('lists what would make a job that does not fit fit, as advise computes it in Node, cheapest first', async () => {
    // Issue 25's job: Qwen2.5-0.5B, batch 8 × 8192 tokens, bf16, AdamW on an A800-80GB (216 GiB needed).
    const hash = 'model=qwen2.5-0.5b&batch=8&seq=8192&precision=bf16&optimizer=adamw&gpu=A800-80GB';
    await page.goto(`${base}#${hash}`);
    await settled(hash);
    await advised(hash);
    const node = advise(llm('qwen2.5-0.5b'), { input: [8, 8192], mode: 'train', precision: 'bf16', optimizer: 'adamw', gpu: 'A800-80GB' });
    expect(node.baseline.fits).toBe(false);
    expect(await page.textContent('#advice-baseline')).toContain('too much');
    expect(await page.getAttribute('#advice-needed', 'data-bytes')).toBe(String(node.baseline.needed));
    expect(await page.textContent('#advice-needed')).toBe(formatBytes(node.baseline.needed));
    const rows = await page.evaluate(() =>
      Array.from(document.querySelectorAll('#advice-levers tbody tr')).map((tr) => ({
        lever: tr.getAttribute('data-lever')!,
        cost: tr.getAttribute('data-cost')!,
        needed: Number(tr.querySelector('td.needed')!.getAttribute('data-bytes')),
        neededText: tr.querySelector('td.needed')!.textContent,
        headroom: Number(tr.querySelector('td.headroom')!.getAttribute('data-bytes')),
      })),
    );
    const fitting = node.levers.filter((l) => l.fits);
    expect(fitting.length).toBeGreaterThan(0);
    // Every fitting lever, in advise's order (the cheapest first), with its needed bytes as Node computes them.
    expect(rows).toEqual(
      fitting.map((l) => ({ lever: l.lever, cost: l.cost.kind, needed: l.needed, neededText: formatBytes(l.needed), headroom: l.headroom })),
    );
    expect(rows[0]!.lever).toBe(node.best!.lever);
    const order = ['none', 'throughput', 'compute', 'hardware', 'quality'];
    for (let i = 1; i < rows.length; i += 1) expect(order.indexOf(rows[i - 1]!.cost)).toBeLessThanOrEqual(order.indexOf(rows[i]!.cost));
    expect(rows.map((r) => r.lever)).toContain('micro-batches');
    // The form changed to a job no lever fits (Qwen2.5-1.5B on an 8 GB RTX-4060): the panel re-runs and says so plainly.
    await page.selectOption('#model', 'qwen2.5-1.5b');
    await page.selectOption('#gpu', 'RTX-4060');
    const none = 'model=qwen2.5-1.5b&batch=8&seq=8192&precision=bf16&optimizer=adamw&gpu=RTX-4060';
    await advised(none);
    expect(advise(llm('qwen2.5-1.5b'), { input: [8, 8192], mode: 'train', precision: 'bf16', optimizer: 'adamw', gpu: 'RTX-4060' }).best).toBeUndefined();
    expect(await page.textContent('#advice-none')).toContain('No change fits');
    expect(await page.locator('#advice-levers').count()).toBe(0);
    expect(problems).toEqual([]);
  }, 60_000);
});
