/**
 * The library as the command's sub-folders see it. The build (tsup.config.ts) maps a
 * `../index.js` imported from src/cli itself to the package's own dist/index.js instead of
 * bundling a second copy (whose VramError would fail `instanceof`); src/cli/commands/*.ts import
 * the library through this file so that the mapping reaches them too.
 */
export * from '../index.js';
