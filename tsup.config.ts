import { defineConfig } from 'tsup';

export default defineConfig([
  {
    entry: { index: 'src/index.ts' },
    format: ['esm', 'cjs'],
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
    // The CLI imports the library (src/cli/*.ts import '../index.js') from the package's own
    // built entry, dist/index.js, instead of bundling a second copy of it.
    esbuildPlugins: [
      {
        name: 'library-entry',
        setup(build) {
          build.onResolve({ filter: /^\.\.\/index\.js$/ }, (args) => (/[\\/]src[\\/]cli$/.test(args.resolveDir) ? { path: './index.js', external: true } : undefined));
        },
      },
    ],
  },
]);
