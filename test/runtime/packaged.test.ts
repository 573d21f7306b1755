/// <reference lib="dom" />
/**
 * The published package works everywhere it is promised: `npm pack`, then the same check
 * (the seed's case) under Node ESM, Node CJS, Deno and Bun, and in headless Chromium from a
 * browser bundle. Also renders an SVG chart in Chromium and checks that it draws.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../helpers/chromium.js';
import { checkBody } from './check-script.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const work = join(root, '.tmp', 'runtime');
const bin = (name: string) => join(root, 'node_modules', '.bin', name);

const esm = `${checkBody("import { estimate, mobilenetV3Small, summary } from 'vram-ts';")}console.log(line);\n`;
const cjs = `${checkBody("const { estimate, mobilenetV3Small, summary } = require('vram-ts');")}console.log(line);\n`;

function run(command: string, args: readonly string[]): string {
  return execFileSync(command, args, {
    cwd: work,
    encoding: 'utf8',
    env: { ...process.env, NO_COLOR: '1', DENO_NO_UPDATE_CHECK: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

beforeAll(() => {
  rmSync(work, { recursive: true, force: true });
  mkdirSync(join(work, 'node_modules'), { recursive: true });
  execFileSync('npm', ['pack', '--pack-destination', work, '--silent'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'))!;
  mkdirSync(join(work, 'node_modules', 'vram-ts'));
  execFileSync('tar', ['-xzf', join(work, tarball), '-C', join(work, 'node_modules', 'vram-ts'), '--strip-components=1']);
  writeFileSync(join(work, 'package.json'), JSON.stringify({ name: 'runtime-check', private: true, type: 'module', dependencies: { 'vram-ts': '*' } }));
  writeFileSync(join(work, 'check.mjs'), esm);
  writeFileSync(join(work, 'check.cjs'), cjs);
}, 120_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

const expectOk = (output: string) => expect(output).toMatch(/vram-ts ok params=1520931 activations=3437733408 peak=\d+/);

describe('the packed package', () => {
  it('ships only dist, package.json, README and license', () => {
    const files = readdirSync(join(work, 'node_modules', 'vram-ts'));
    expect(files.sort()).toEqual(expect.arrayContaining(['dist', 'package.json']));
    expect(files.filter((f) => !['dist', 'package.json', 'README.md', 'LICENSE', 'CHANGELOG.md'].includes(f))).toEqual([]);
  });

  it('runs under Node ESM', () => expectOk(run(process.execPath, ['check.mjs'])));
  it('runs under Node CJS', () => expectOk(run(process.execPath, ['check.cjs'])));
  it('runs under Deno', () => expectOk(run(bin('deno'), ['run', '--allow-read', '--allow-env', 'check.mjs'])));
  it('runs under Bun', () => expectOk(run(bin('bun'), ['check.mjs'])));

  it('runs in headless Chromium from a browser bundle, and an SVG timeline draws', async () => {
    writeFileSync(
      join(work, 'browser-entry.mjs'),
      `${checkBody("import { estimate, mobilenetV3Small, summary, timelineSvg } from 'vram-ts';")}globalThis.__line = line;\nglobalThis.__svg = timelineSvg(estimate(model, { input: [1, 3, 224, 224] }));\n`,
    );
    run(bin('esbuild'), ['browser-entry.mjs', '--bundle', '--format=iife', '--platform=browser', '--outfile=browser-bundle.js', '--log-level=error']);
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      await page.setContent('<!doctype html><html><body></body></html>');
      await page.addScriptTag({ path: join(work, 'browser-bundle.js') });
      expectOk(await page.evaluate(() => (globalThis as unknown as { __line: string }).__line));
      const drawn = await page.evaluate(() => {
        document.body.innerHTML = (globalThis as unknown as { __svg: string }).__svg;
        const svg = document.querySelector('svg')!;
        const areas = Array.from(svg.querySelectorAll('polygon.area')).map((p) => (p as SVGGraphicsElement).getBBox());
        const peak = (svg.querySelector('circle.peak') as SVGGraphicsElement).getBBox();
        return { areas: areas.length, widest: Math.max(...areas.map((b) => b.width)), tallest: Math.max(...areas.map((b) => b.height)), peak: peak.width };
      });
      expect(drawn.areas).toBeGreaterThanOrEqual(4);
      expect(drawn.widest).toBeGreaterThan(500);
      expect(drawn.tallest).toBeGreaterThan(50);
      expect(drawn.peak).toBeGreaterThan(5);
      const png = await page.locator('svg').screenshot();
      expect(png.length).toBeGreaterThan(5000);
    } finally {
      await browser.close();
    }
  });
});
