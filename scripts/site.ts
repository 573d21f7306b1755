/**
 * Builds the calculator page: site/index.html and site/style.css copied, site/app.ts bundled
 * with the library's own source by esbuild (no CDN, no network) into site/dist/app.js.
 * Open site/dist/index.html through any static server (`npx vite preview --outDir site/dist`,
 * `python3 -m http.server -d site/dist`) or straight from the file system.
 *
 *   npm run site
 */
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Builds the page into `outDir` (default site/dist) and returns the directory. */
export async function buildSite(outDir = join(root, 'site', 'dist')): Promise<string> {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  await build({
    entryPoints: [join(root, 'site', 'app.ts')],
    bundle: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2022',
    minify: true,
    sourcemap: false,
    legalComments: 'none',
    outfile: join(outDir, 'app.js'),
    logLevel: 'error',
  });
  for (const file of ['index.html', 'style.css']) copyFileSync(join(root, 'site', file), join(outDir, file));
  return outDir;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = await buildSite();
  console.log(
    `site/dist/index.html (app.js ${(statSync(join(out, 'app.js')).size / 1024).toFixed(0)} KB): serve site/dist, e.g. python3 -m http.server -d site/dist`,
  );
}
