/**
 * Headless Chromium for the browser checks, on any machine: a system Chromium when one is
 * installed (`VRAM_TS_CHROMIUM`, then Debian's and the usual paths), otherwise the one shipped
 * inside the `@sparticuz/chromium` dev dependency (unpacked to the temp folder, offline).
 */
import { existsSync } from 'node:fs';
import type { Browser } from 'playwright-core';

const SYSTEM = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** The Chromium executable the checks use, and where it comes from. */
export async function chromiumPath(): Promise<{ readonly path: string; readonly source: 'system' | 'package' }> {
  const given = process.env.VRAM_TS_CHROMIUM;
  if (given !== undefined && given !== '') {
    if (!existsSync(given)) throw new Error(`VRAM_TS_CHROMIUM is ${given}, which does not exist`);
    return { path: given, source: 'system' };
  }
  const system = SYSTEM.find((path) => existsSync(path));
  if (system !== undefined) return { path: system, source: 'system' };
  const { default: packaged } = await import('@sparticuz/chromium');
  return { path: await packaged.executablePath(), source: 'package' };
}

/** Launches headless Chromium through playwright-core. */
export async function launchChromium(): Promise<Browser> {
  const { path } = await chromiumPath();
  const { chromium } = await import('playwright-core');
  return chromium.launch({ executablePath: path, args: ARGS });
}
