import { defineConfig } from 'tsup';

export default defineConfig([
  {
    // Two entries, `vram-ts` and `vram-ts/internals`, over shared chunks (CommonJS too), so that
    // both see one copy of the library: a VramError from either passes the other's `instanceof`.
    entry: { index: 'src/index.ts', internals: 'src/internals.ts' },
    format: ['esm', 'cjs'],
    splitting: true,
    dts: true,
    sourcemap: true,
    clean: true,
    treeshake: true,
    target: 'es2022',
    platform: 'neutral',
  },
  {
    entry: { cli: 'src/cli/bin.ts' },
    format: ['esm'],
    sourcemap: true,
    target: 'node18',
    platform: 'node',
    // The CLI imports the library (src/cli/*.ts import '../index.js', or '../internals.js') from
    // the package's own built entries, dist/index.js and dist/internals.js, instead of bundling a
    // second copy of it.
    esbuildPlugins: [
      {
        name: 'library-entry',
        setup(build) {
          build.onResolve({ filter: /^\.\.\/(index|internals)\.js$/ }, (args) =>
            /[\\/]src[\\/]cli$/.test(args.resolveDir) ? { path: args.path.slice(1), external: true } : undefined,
          );
        },
      },
    ],
  },
]);
