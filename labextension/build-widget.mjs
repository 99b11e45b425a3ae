// Bundle the live view's anywidget front end (lib/widget.js, from src/widget.ts) into one ES module,
// jupyter_torchdist/static/widget.js, and copy the shared stylesheet beside it as widget.css.
// Run after `tsc` (see `build:widget` in package.json); uses the rspack that @jupyter/builder brings.
import { copyFileSync, mkdirSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { rspack } from '@rspack/core';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(here, '..', 'jupyter_torchdist', 'static');
const production = !process.argv.includes('--development');

const config = {
  mode: production ? 'production' : 'development',
  context: here,
  entry: { widget: './lib/widget.js' },
  target: ['web', 'es2020'],
  devtool: false,
  experiments: { outputModule: true },
  output: {
    path: out,
    filename: '[name].js',
    module: true,
    library: { type: 'module' },
    clean: false
  },
  optimization: { splitChunks: false, runtimeChunk: false },
  performance: { hints: false }
};

mkdirSync(out, { recursive: true });
rspack(config, (err, stats) => {
  if (err || stats.hasErrors()) {
    console.error(err ?? stats.toString({ colors: false, all: false, errors: true }));
    process.exit(1);
  }
  copyFileSync(resolve(here, 'style', 'base.css'), resolve(out, 'widget.css'));
  for (const name of ['widget.js', 'widget.css']) {
    console.log(`jupyter_torchdist/static/${name}: ${statSync(resolve(out, name)).size} bytes`);
  }
});
