// Bundle the live view's anywidget front end (lib/widget.js, from src/widget.ts) into one ES module,
// jupyter_torchdist/static/widget.js, and copy the shared stylesheet beside it as widget.css.
// Run after `tsc` (see `build:widget` in package.json); uses the rspack that @jupyter/builder brings.
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { rspack } from '@rspack/core';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(here, '..', 'jupyter_torchdist', 'static');
const production = !process.argv.includes('--development');

// The production build leaves a stamp beside its output: the digest of every source file it read, computed as
// hatch_build.py's sources_digest() does, so that installing a clone skips the build when the committed build is
// these sources' (no Node.js needed), and tests/unit/test_labextension_build.py can tell a stale committed build.
const NOT_SOURCES = new Set(['node_modules', 'lib', '.yarn', 'README.md', 'install.json']);

function sourceFiles(dir, prefix = '') {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (NOT_SOURCES.has(entry.name)) continue;
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...sourceFiles(resolve(dir, entry.name), rel));
    else if (entry.isFile()) out.push(rel);
  }
  return out;
}

function sourcesDigest() {
  const outer = createHash('sha256');
  for (const rel of sourceFiles(here).sort()) {
    const inner = createHash('sha256').update(readFileSync(resolve(here, rel))).digest('hex');
    outer.update(`${rel}\0${inner}\n`);
  }
  return outer.digest('hex');
}

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
  if (production) {
    writeFileSync(resolve(out, 'sources.sha256'), sourcesDigest() + '\n');
    console.log('jupyter_torchdist/static/sources.sha256: the sources this build was made from');
  }
});
